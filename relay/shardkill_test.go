package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// shardProcess starts the relay binary running shard i of a 4-shard pipeline "orders", with
// --shard i. Each process's config names its own receiver: the shards of one pipeline share a
// destination in production, but a receiver per process shows which process delivered what.
func (e *env) shardProcess(i, n int, recv *relaytest.Receiver) *exec.Cmd {
	e.t.Helper()
	path := filepath.Join(e.t.TempDir(), "relay.yaml")
	conf := fmt.Sprintf(`pipelines:
  - name: orders
    shards: %d
    slot: %s
    publication: pub_%s
    webhook: {url: %q, secret: %q}
    retry_min: 10ms
    retry_max: 200ms
`, n, e.slot, e.slot, recv.URL, secret)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(relaytest.RelayBinary(e.t), "run", "--config", path, "--shard", fmt.Sprint(i), "--metrics-addr", "",
		"--log-format", "json", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	cmd.Stderr = testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// shardOf returns the documented shard (of n) of each aggregate ("type/id"), computed by
// PostgreSQL with the formula a consumer uses.
func (e *env) shardOf(aggs []string, n int) map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), fmt.Sprintf(`SELECT a,
		((hashtextextended(split_part(a, '/', 1) || ':' || substr(a, strpos(a, '/') + 1), 0) %% %[1]d) + %[1]d) %% %[1]d
		FROM unnest($1::text[]) a`, n), aggs)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var a string
		var s int
		if err := rows.Scan(&a, &s); err != nil {
			e.t.Fatal(err)
		}
		out[a] = s
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A pipeline of 4 shards, one process per shard (--shard I, as pods would run them), 20k events
// over 1,000 aggregates, 5% of requests failing, each process SIGKILLed once mid-stream and
// restarted: every event is delivered, every aggregate only by the process of its shard, and no
// aggregate's events arrive out of order.
func TestShardsOneProcessEachSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	const n = 4
	e := newEnv(t)
	recvs := make([]*relaytest.Receiver, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		recvs[i] = relaytest.NewReceiver(secret)
		t.Cleanup(recvs[i].Close)
		recvs[i].SetFail(func(*http.Request) int {
			if rand.Float64() < 0.05 {
				return http.StatusServiceUnavailable
			}
			return 0
		})
		cmds[i] = e.shardProcess(i, n, recvs[i])
	}
	waitFor(t, time.Minute, "4 shard slots created", func() bool {
		var c int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1
			AND confirmed_flush_lsn IS NOT NULL`, e.slot+"_s%of4").Scan(&c)
		return c == n
	})
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(context.Background(), e.pool,
			relaytest.Workload{Events: 20000, Aggregates: 1000, MaxTxSize: 10, Rollback: 0.05, Writers: 4})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	// One SIGKILL per shard, each once its process has delivered something (so it dies mid-stream).
	for i := range n {
		waitFor(t, 2*time.Minute, fmt.Sprintf("shard %d delivering", i), func() bool { return len(recvs[i].Deliveries()) > 200 })
		if err := cmds[i].Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmds[i].Wait()
		cmds[i] = e.shardProcess(i, n, recvs[i])
	}
	res := <-produced
	var all []relaytest.Delivery
	deadline := time.Now().Add(5 * time.Minute)
	var rep relaytest.Report
	for {
		all = all[:0]
		for _, r := range recvs {
			all = append(all, r.Deliveries()...)
		}
		rep = relaytest.Check(res, all)
		if len(rep.Lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	requireOK(t, rep)

	aggs := map[string]bool{}
	for _, c := range res.Committed {
		aggs[c.Aggregate] = true
	}
	list := make([]string, 0, len(aggs))
	for a := range aggs {
		list = append(list, a)
	}
	shard := e.shardOf(list, n)
	perShard := make([]map[string]bool, n)
	for i, r := range recvs {
		perShard[i] = map[string]bool{}
		for _, d := range r.Deliveries() {
			perShard[i][d.Aggregate] = true
			if s, ok := shard[d.Aggregate]; !ok || s != i {
				t.Fatalf("aggregate %s (shard %d) delivered by the process of shard %d", d.Aggregate, s, i)
			}
		}
	}
	var counts []string
	for i := range n {
		// Positive control: every shard carried a fair part of the aggregates.
		if len(perShard[i]) < len(aggs)/(2*n) {
			t.Fatalf("shard %d carried %d of %d aggregates: the hash does not spread them", i, len(perShard[i]), len(aggs))
		}
		counts = append(counts, fmt.Sprint(len(perShard[i])))
	}
	t.Logf("%d events over %d aggregates; aggregates per shard %s; duplicates %d", len(res.Committed), len(aggs),
		strings.Join(counts, "/"), rep.Duplicates)
}
