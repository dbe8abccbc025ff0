package relay

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// What the broker tests share: the relay binary started against a broker, the log of what the
// broker holds, and the checks of the guarantees on it.

// brokerProcess starts the relay binary against this env's database with the broker flags
// args (no webhook).
func (e *env) brokerProcess(args ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(e.t), append([]string{"run", "--slot", e.slot, "--publication", "pub_" + e.slot,
		"--metrics-addr", "", "--retry-min", "10ms", "--retry-max", "200ms", "--request-timeout", "2s",
		"--log-format", "json", "--log-level", "warn"}, args...)...)
	env := []string{"DB_DSN=" + e.dsn}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEBHOOK_") && !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "KAFKA_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stderr = testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// brokerMsg is one message as the broker holds it: where (partition, offset; a NATS stream is
// partition 0 with the stream sequence as offset) and which event.
type brokerMsg struct {
	Part      int
	Off       int64
	ID        string
	Aggregate string // type/id
	Seq       int    // the producer's per-aggregate sequence, from the payload
	CommitLSN int64  // from X-Event-Sequence
}

// newBrokerMsg reads a message's event from its headers and payload.
func newBrokerMsg(t *testing.T, part int, off int64, header func(string) string, data []byte) brokerMsg {
	t.Helper()
	var p struct {
		Seq int `json:"seq"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("message at %d/%d: payload %q: %v", part, off, data, err)
	}
	seq := header("X-Event-Sequence")
	lsn, err := strconv.ParseInt(strings.SplitN(seq, "-", 2)[0], 16, 64)
	if err != nil {
		t.Fatalf("message at %d/%d: X-Event-Sequence %q: %v", part, off, seq, err)
	}
	return brokerMsg{Part: part, Off: off, ID: header("X-Event-Id"), Seq: p.Seq, CommitLSN: lsn,
		Aggregate: header("X-Aggregate-Type") + "/" + header("X-Aggregate-Id")}
}

// confirmSample is the slot's confirmed LSN, read before the broker's end offsets (the next
// offset per partition): every event committed below Confirmed must be stored below End.
type confirmSample struct {
	Confirmed int64
	End       map[int]int64
}

// sampleConfirmed samples the slot's confirmed LSN then the broker's end offsets (end; false
// when the broker did not answer) every 100ms until ctx ends; wait returns the samples.
func (e *env) sampleConfirmed(ctx context.Context, end func(context.Context) (map[int]int64, bool)) (wait func() []confirmSample) {
	var (
		mu      sync.Mutex
		samples []confirmSample
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var confirmed int64
			err := e.pool.QueryRow(ctx, `SELECT COALESCE(pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint, 0)
				FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&confirmed)
			if err == nil && confirmed > 0 {
				if offs, ok := end(ctx); ok {
					mu.Lock()
					samples = append(samples, confirmSample{Confirmed: confirmed, End: offs})
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() []confirmSample {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return samples
	}
}

// checkBroker checks what the broker holds against what was committed: nothing lost, no
// phantom, per aggregate the first appearances in commit order (msgs are in broker order per
// partition, and an aggregate lives in one partition), and the slot never confirmed past an
// event the broker did not hold yet. It returns the report.
func checkBroker(t *testing.T, res relaytest.Result, msgs []brokerMsg, samples []confirmSample) relaytest.Report {
	t.Helper()
	deliveries := make([]relaytest.Delivery, len(msgs))
	first := map[string]brokerMsg{}
	for i, m := range msgs {
		deliveries[i] = relaytest.Delivery{ID: m.ID, Aggregate: m.Aggregate, Seq: m.Seq}
		if _, ok := first[m.ID]; !ok {
			first[m.ID] = m
		}
	}
	rep := relaytest.Check(res, deliveries)
	requireOK(t, rep)
	checked, early := 0, 0
	for _, s := range samples {
		for _, m := range first {
			if m.CommitLSN >= s.Confirmed {
				continue
			}
			checked++
			if end, ok := s.End[m.Part]; !ok || m.Off >= end {
				early++
				if early <= 5 {
					t.Errorf("slot confirmed %X while event %s (commit %X) was not in the broker yet (stored at %d/%d, end then %d)",
						s.Confirmed, m.ID, m.CommitLSN, m.Part, m.Off, end)
				}
			}
		}
	}
	if early > 0 {
		t.Fatalf("the slot was confirmed past %d unacknowledged events", early)
	}
	// Positive control: the samples did cover confirmed events.
	if checked == 0 {
		t.Fatalf("no sample of the confirmed LSN covered any event (%d samples): the confirmation check checked nothing", len(samples))
	}
	t.Logf("%d samples of the confirmed LSN; %d (sample, event) pairs checked; %d messages for %d events",
		len(samples), checked, len(msgs), rep.Committed)
	return rep
}

// brokerSink is what a broker run needs of its broker: the relay's flags, the end offsets for
// sampleConfirmed, and everything it holds (false while it cannot be read, e.g. a cluster
// electing a leader).
type brokerSink struct {
	args []string
	end  func(context.Context) (map[int]int64, bool)
	read func(context.Context) ([]brokerMsg, bool)
}

// brokerKillRun writes 10k events over 100 aggregates while the relay binary delivers them to
// the broker and faults injects faults; kill SIGKILLs the relay and starts another. Once every
// event is committed (and afterProduce, if set, has run), it waits until the broker holds every
// event and the slot confirmed past the last, and checks: nothing lost, first appearances in
// commit order per aggregate, the slot never confirmed past an event the broker lacked (the
// confirmed LSN sampled before the broker's end offsets), and the last relay exits 0 on
// SIGTERM.
func (e *env) brokerKillRun(ctx context.Context, sink brokerSink, faults func(kill func()), afterProduce func()) {
	t := e.t
	t.Helper()
	cmd := e.brokerProcess(sink.args...)
	waitFor(t, 60*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := e.sampleConfirmed(sampleCtx, sink.end)
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(ctx, e.pool,
			relaytest.Workload{Events: 10000, Aggregates: 100, MaxTxSize: 10, Rollback: 0.05, Writers: 4})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	faults(func() {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cmd = e.brokerProcess(sink.args...)
	})
	res := <-produced
	if afterProduce != nil {
		afterProduce()
	}
	var msgs []brokerMsg
	waitFor(t, 5*time.Minute, "every event in the broker", func() bool {
		var ok bool
		msgs, ok = sink.read(ctx)
		return ok && relaytest.Check(res, toDeliveries(msgs)).Delivered == len(res.Committed)
	})
	var maxLSN int64
	for _, m := range msgs {
		maxLSN = max(maxLSN, m.CommitLSN)
	}
	waitFor(t, 2*time.Minute, "slot confirmed past the last event", func() bool {
		c, _ := e.slotLSNs()
		return c > maxLSN
	})
	time.Sleep(200 * time.Millisecond) // one more sample after the final confirmation
	stopSampling()
	waitFor(t, 2*time.Minute, "a final read of the broker", func() bool {
		var ok bool
		msgs, ok = sink.read(ctx)
		return ok
	})
	rep := checkBroker(t, res, msgs, samples())
	t.Logf("duplicates %d of %d events", rep.Duplicates, rep.Committed)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
	}
}

// killsAndABrokerRestart are the faults of the SIGKILL tests: four steps 0.4–1 s apart, three
// relay SIGKILLs and, third, a broker crash: down (stop) for 0.2–1 s with sends in flight, then
// back from its data (start).
func killsAndABrokerRestart(stop, start func()) func(kill func()) {
	return func(kill func()) {
		for step := 0; step < 4; step++ {
			time.Sleep(time.Duration(400+rand.IntN(600)) * time.Millisecond)
			if step == 2 {
				stop()
				time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
				start()
				continue
			}
			kill()
		}
	}
}
