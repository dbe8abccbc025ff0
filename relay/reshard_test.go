package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// shardConfig writes a pipelines file with pipeline "orders" in n shards to recv.
func (e *env) shardConfig(n int, recv *relaytest.Receiver, extra string) string {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), fmt.Sprintf("relay%d.yaml", n))
	conf := fmt.Sprintf(`pipelines:
  - name: orders
    shards: %d
    slot: %s
    publication: pub_%s
    webhook: {url: %q, secret: %q}
    retry_min: 10ms
    retry_max: 200ms
%s`, n, e.slot, e.slot, recv.URL, secret, extra)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// shardRun starts the relay binary on config, shard i.
func (e *env) shardRun(config string, i int) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(e.t), "run", "--config", config, "--shard", fmt.Sprint(i), "--metrics-addr", "",
		"--log-format", "json", "--log-level", "info")
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	cmd.Stderr = testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// steadyWriter writes one transaction of 1-3 events over 200 aggregates every 5 ms until stop,
// so aggregates span the whole reshard; wait returns what it committed.
func (e *env) steadyWriter() (stop func() relaytest.Result) {
	ctx, cancel := context.WithCancel(context.Background())
	var res relaytest.Result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		seq := map[string]int{}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			<-t.C
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				continue
			}
			var evs []relaytest.Committed
			for range 1 + rand.IntN(3) {
				agg := fmt.Sprint("a", rand.IntN(200))
				seq[agg]++
				id, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: agg,
					EventType: "order.changed", Payload: map[string]int{"seq": seq[agg]}})
				if err != nil {
					break
				}
				evs = append(evs, relaytest.Committed{ID: id.String(), Aggregate: "order/" + agg, Seq: seq[agg]})
			}
			if err := tx.Commit(context.Background()); err != nil {
				for _, ev := range evs { // not committed: the sequence goes back
					seq[ev.Aggregate[len("order/"):]]--
				}
				continue
			}
			res.Committed = append(res.Committed, evs...)
		}
	}()
	return func() relaytest.Result { cancel(); wg.Wait(); return res }
}

// Reshard 2 -> 4 while events are written at a steady rate. The old shards deliver to a slow
// receiver, the new ones to a fast one, so without the fence a new shard would overtake an old
// one on some aggregate; an old relay and a new relay are SIGKILLed once the fence exists and
// restarted. Everything arrives, first deliveries in order per aggregate (over both receivers
// by arrival time), and at the end the old slots are gone and the new ones remain.
func TestReshardTwoToFourUnderLoadWithSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	slow, fast := relaytest.NewReceiver(secret), relaytest.NewReceiver(secret)
	t.Cleanup(slow.Close)
	t.Cleanup(fast.Close)
	var blackout atomic.Bool
	slow.SetFail(func(*http.Request) int {
		if blackout.Load() {
			return http.StatusServiceUnavailable
		}
		time.Sleep(2 * time.Millisecond)
		return 0
	})
	cfg2 := e.shardConfig(2, slow, "    max_in_flight: 1\n")
	cfg4 := e.shardConfig(4, fast, "")
	old := []*exec.Cmd{e.shardRun(cfg2, 0), e.shardRun(cfg2, 1)}
	waitFor(t, time.Minute, "2 slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	stop := e.steadyWriter()
	waitFor(t, time.Minute, "old shards delivering", func() bool { return len(slow.Deliveries()) > 300 })

	// The old shards' destination fails from before the fence until well after it, so they hold
	// undelivered events from before the fence while the new shards could deliver later ones.
	blackout.Store(true)
	reshard := exec.Command(relaytest.RelayBinary(t), "reshard", "--config", cfg2, "--pipeline", "orders", "--to", "4", "--wait", "5m")
	reshard.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	reshard.Stdout, reshard.Stderr = testWriter{t}, testWriter{t}
	if err := reshard.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "fence recorded", func() bool {
		var set bool
		_ = e.pool.QueryRow(ctx, `SELECT fence IS NOT NULL FROM outbox_reshard WHERE pipeline = 'orders'`).Scan(&set)
		return set
	})
	var news []*exec.Cmd
	for i := range 4 {
		news = append(news, e.shardRun(cfg4, i))
	}
	// In the middle of the fence: SIGKILL an old shard's relay and a new shard's relay.
	for _, c := range []**exec.Cmd{&old[0], &news[1]} {
		if err := (*c).Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = (*c).Wait()
	}
	old[0], news[1] = e.shardRun(cfg2, 0), e.shardRun(cfg4, 1)
	// The gate holds: while the old shards are behind the fence, the new ones deliver nothing,
	// though they stream and events keep committing after the fence. (Without the gate this
	// run sees the new shards deliver within a second: the condition below ends early then.)
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && len(fast.Deliveries()) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(fast.Deliveries()); n > 0 {
		t.Fatalf("the new shards delivered %d events while the old shards were behind the fence", n)
	}
	blackout.Store(false)
	if err := reshard.Wait(); err != nil {
		t.Fatalf("reshard: %v", err)
	}
	time.Sleep(time.Second) // writes keep going after the reshard: the new shards carry them
	res := stop()
	var rep relaytest.Report
	waitFor(t, 3*time.Minute, "everything delivered", func() bool {
		rep = relaytest.Check(res, byArrival(slow, fast))
		return len(rep.Lost) == 0
	})
	requireOK(t, rep)
	if len(slow.Deliveries()) == 0 || len(fast.Deliveries()) == 0 {
		t.Fatalf("old shards delivered %d, new shards %d: both must have carried part", len(slow.Deliveries()), len(fast.Deliveries()))
	}
	var oldLeft, newThere int
	_ = e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE slot_name LIKE $1), count(*) FILTER (WHERE slot_name LIKE $2)
		FROM pg_replication_slots`, e.slot+"_s%of2", e.slot+"_s%of4").Scan(&oldLeft, &newThere)
	if oldLeft != 0 || newThere != 4 {
		t.Fatalf("%d old slots left (want 0), %d new slots (want 4)", oldLeft, newThere)
	}
	t.Logf("%d events; %d via the old shards, %d via the new; duplicates %d", len(res.Committed),
		len(slow.Deliveries()), len(fast.Deliveries()), rep.Duplicates)
}

// byArrival merges the receivers' deliveries in arrival order.
func byArrival(rs ...*relaytest.Receiver) []relaytest.Delivery {
	var all []relaytest.Delivery
	for _, r := range rs {
		all = append(all, r.Deliveries()...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
	return all
}

// Editing shards: by hand while the old shards' slots exist is refused at start, naming the
// command that changes the count safely; the same count starts.
func TestShardCountContradictingTheSlotsIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot+"_s1of2"); err != nil {
		t.Fatal(err)
	}
	pipes := func(n int) []Pipeline {
		return []Pipeline{{Name: "orders", Shards: n, Slot: e.slot, WebhookURL: e.recv.URL, Secrets: []string{secret}}}
	}
	cfg := e.config()
	cfg.Pipelines = pipes(4)
	cfg = flagFieldsCleared(cfg)
	err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "outbox-relay reshard --pipeline orders --to 4") {
		t.Fatalf("shards 4 over slots of 2: %v; want a refusal naming reshard", err)
	}
	// Positive control: the count the slots say passes the check.
	cfg.Pipelines = pipes(2)
	p, perr := cfg.pipelines()
	if perr != nil {
		t.Fatal(perr)
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := checkShardCounts(ctx, conn, p, cfg); err != nil {
		t.Fatalf("shards 2 over slots of 2: %v", err)
	}
}
