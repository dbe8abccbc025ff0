package relay

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// relayProc starts the relay binary on config with extra flags; its stderr goes to the test log
// and to the returned buffer.
func (e *env) relayProc(config string, extra ...string) (*exec.Cmd, *relaytest.SyncBuffer) {
	e.t.Helper()
	args := append([]string{"run", "--config", config, "--metrics-addr", "", "--log-format", "json", "--log-level", "info"}, extra...)
	cmd := exec.Command(relaytest.RelayBinary(e.t), args...)
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	logs := &relaytest.SyncBuffer{}
	cmd.Stderr = multiWriter{testWriter{e.t}, logs}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, logs
}

type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(p []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// exitCode waits up to within for cmd to exit and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("%v still running after %s", cmd.Args, within)
	}
	return -1
}

func (e *env) reshardCmd(config string, to string, extra ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(e.t), append([]string{"reshard", "--config", config, "--pipeline", "orders", "--to", to}, extra...)...)
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	cmd.Stdout, cmd.Stderr = testWriter{e.t}, testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// waitFence waits until the reshard of "orders" has recorded its fence (its new slots exist).
func (e *env) waitFence() {
	e.t.Helper()
	waitFor(e.t, time.Minute, "fence recorded", func() bool {
		var set bool
		_ = e.pool.QueryRow(context.Background(), `SELECT fence IS NOT NULL FROM outbox_reshard WHERE pipeline = 'orders'`).Scan(&set)
		return set
	})
}

func (e *env) countSlots(like string) int {
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1`, like).Scan(&n)
	return n
}

// countReadySlots counts the slots named like that have reached their consistent point, from
// which rows committed are streamed (see waitSlot): a test writes only once its slots have.
func (e *env) countReadySlots(like string) int {
	var n int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1
		AND confirmed_flush_lsn IS NOT NULL`, like).Scan(&n)
	return n
}

// After `reshard` retired an old shard's slot, that old shard started again (a supervisor
// restarting the pod that exited when it retired) refuses to start, naming the new count, and
// creates no slot: a slot made again would pin WAL for ever. Both when the reshard is marked
// done and in the state an interrupted reshard leaves between dropping the old slots and marking
// it done. (Before, the second start created the old slots again, streamed, retired and exited
// 0, leaving two stray slots.)
func TestOldShardAfterReshardDoesNotRecreateItsSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cfg2, cfg4 := e.shardConfig(2, e.recv, ""), e.shardConfig(4, e.recv, "")
	e.relayProc(cfg2)
	waitFor(t, time.Minute, "the 2 old slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	first := e.produce(relaytest.Workload{Events: 200, Aggregates: 20, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(first, time.Minute))
	reshard := e.reshardCmd(cfg2, "4", "--wait", "2m")
	e.waitFence()
	e.relayProc(cfg4)
	if code := exitCode(t, reshard, 3*time.Minute); code != 0 {
		t.Fatalf("reshard exited %d", code)
	}
	second := e.produce(relaytest.Workload{Events: 200, Aggregates: 20, MaxTxSize: 3, Type: "invoice"})
	second.Committed = append(first.Committed, second.Committed...)
	requireOK(t, e.waitDelivered(second, time.Minute))
	for _, state := range []struct{ name, sql string }{
		{"reshard done", ""},
		{"old slots dropped, reshard not yet marked done", `UPDATE outbox_reshard SET finished_at = NULL`},
	} {
		if state.sql != "" {
			if _, err := e.pool.Exec(ctx, state.sql); err != nil {
				t.Fatal(err)
			}
		}
		cmd, logs := e.relayProc(cfg2)
		if code := exitCode(t, cmd, time.Minute); code == 0 || !strings.Contains(logs.String(), "shards: 4") {
			t.Fatalf("%s: an old shard exited %d; want a refusal naming shards: 4:\n%s", state.name, code, logs.String())
		}
		if n := e.countSlots(e.slot + "_s%of2"); n != 0 {
			t.Fatalf("%s: the old shard created %d slot(s) again", state.name, n)
		}
	}
}

// An old shard's slot dropped by hand while a reshard waits for the old shards to reach the
// fence (their destination is down, so they are behind it): that shard's events committed
// before the fence and not yet delivered are in no slot. The new shards keep waiting (they
// deliver nothing), the reshard command stops naming the fix, and the old shard refuses a plain
// restart with the same fix; started once with --recreate-slot it backfills its shard's
// pending rows, the fence is reached, the new shards deliver, the reshard finishes, and nothing
// is lost or out of order. (Before, the missing slot counted as past the fence: the new shards
// started at once, and the events only that slot carried were never delivered.)
func TestOldSlotDroppedBeforeTheFenceIsReportedNeverLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old, fresh := relaytest.NewReceiver(secret), relaytest.NewReceiver(secret)
	t.Cleanup(old.Close)
	t.Cleanup(fresh.Close)
	var blackout atomic.Bool
	old.SetFail(func(*http.Request) int {
		if blackout.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	cfg2, cfg4 := e.shardConfig(2, old, ""), e.shardConfig(4, fresh, "")
	shard0, _ := e.relayProc(cfg2, "--shard", "0")
	e.relayProc(cfg2, "--shard", "1")
	waitFor(t, time.Minute, "the 2 old slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	stop := e.steadyWriter()
	waitFor(t, time.Minute, "old shards delivering", func() bool { return len(old.Deliveries()) > 300 })
	blackout.Store(true)
	reshard := e.reshardCmd(cfg2, "4", "--wait", "5m")
	e.waitFence()
	e.relayProc(cfg4)
	// Drop old shard 0's slot by hand: end its walsender first, as an administrator would.
	waitFor(t, time.Minute, "old slot 0 dropped by hand", func() bool {
		_, _ = e.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`,
			e.slot+"_s0of2")
		_, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot+"_s0of2")
		return err == nil || e.countSlots(e.slot+"_s0of2") == 0
	})
	if code := exitCode(t, shard0, time.Minute); code == 0 {
		t.Fatal("old shard 0 exited 0 after its slot was dropped")
	}
	blackout.Store(false) // old shard 1 now reaches the fence; only the missing slot holds the gate
	if code := exitCode(t, reshard, 3*time.Minute); code == 0 {
		t.Fatal("reshard finished although an old slot was dropped before the fence")
	}
	if n := len(fresh.Deliveries()); n != 0 {
		t.Fatalf("the new shards delivered %d events while an old slot's events were in no slot", n)
	}
	plain, logs := e.relayProc(cfg2, "--shard", "0")
	if code := exitCode(t, plain, time.Minute); code == 0 || !strings.Contains(logs.String(), "--recreate-slot") {
		t.Fatalf("plain restart of old shard 0 exited %d; want a refusal naming --recreate-slot:\n%s", code, logs.String())
	}
	e.relayProc(cfg2, "--shard", "0", "--recreate-slot")
	// The command refuses at once while an old slot is missing: start it once the slot is back.
	waitFor(t, time.Minute, "old slot 0 recreated", func() bool { return e.countReadySlots(e.slot+"_s0of2") == 1 })
	if code := exitCode(t, e.reshardCmd(cfg2, "4", "--wait", "3m"), 4*time.Minute); code != 0 {
		t.Fatalf("reshard after the repair exited %d", code)
	}
	time.Sleep(time.Second) // writes go on after the reshard: the new shards carry them
	res := stop()
	var rep relaytest.Report
	waitFor(t, 3*time.Minute, "everything delivered", func() bool {
		rep = relaytest.Check(res, byArrival(old, fresh))
		return len(rep.Lost) == 0
	})
	requireOK(t, rep)
	if len(fresh.Deliveries()) == 0 || e.countSlots(e.slot+"_s%of2") != 0 {
		t.Fatalf("new shards delivered %d; old slots left %d", len(fresh.Deliveries()), e.countSlots(e.slot+"_s%of2"))
	}
}
