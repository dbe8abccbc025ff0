package relay

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// steadyWriter commits events one per transaction at a steady rate over many aggregates, each
// aggregate of one tenant, and adds each to the want of the partner of that tenant. It runs
// until stop, which waits for it.
type steadyWriter struct {
	e        *env
	partners []*partner // partner i takes tenant "t<i>"
	mu       sync.Mutex
	stopc    chan struct{}
	done     chan error
}

func (e *env) steadyWrite(partners []*partner, perSecond, aggregates int) *steadyWriter {
	w := &steadyWriter{e: e, partners: partners, stopc: make(chan struct{}), done: make(chan error, 1)}
	go func() { w.done <- w.run(perSecond, aggregates) }()
	e.t.Cleanup(func() { _ = w.stop() })
	return w
}

func (w *steadyWriter) run(perSecond, aggregates int) error {
	const tick = 20 * time.Millisecond
	perTick := max(1, perSecond*int(tick)/int(time.Second))
	seq := make([]int, aggregates)
	next := 0
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-w.stopc:
			return nil
		case <-t.C:
		}
		for range perTick {
			a := next % aggregates
			next++
			p := a % len(w.partners)
			agg := fmt.Sprintf("iso-%d", a)
			seq[a]++
			id, err := outbox.Enqueue(context.Background(), w.e.pool, outbox.Event{AggregateType: "order", AggregateID: agg,
				EventType: "order.created", TenantID: fmt.Sprintf("t%d", p), Payload: map[string]int{"seq": seq[a]}})
			if err != nil {
				return err
			}
			w.mu.Lock()
			w.partners[p].want.Committed = append(w.partners[p].want.Committed,
				relaytest.Committed{ID: id.String(), Aggregate: "order/" + agg, Seq: seq[a]})
			w.mu.Unlock()
		}
	}
}

// stop ends the writes and waits for the writer; it is safe to call twice.
func (w *steadyWriter) stop() error {
	select {
	case <-w.stopc:
		return nil
	default:
	}
	close(w.stopc)
	return <-w.done
}

// written is what the partner must have received so far.
func (w *steadyWriter) written(p *partner) relaytest.Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return relaytest.Result{Committed: slices.Clone(p.want.Committed)}
}

// lag is the WAL the slot retains past what it confirmed, and the server's current position.
func (e *env) lag() (retained, current int64) {
	confirmed, current := e.slotLSNs()
	return current - confirmed, current
}

// One of 20 endpoints blacked out (its receiver hangs every request) for 24 seconds while
// events flow at 200/s: it spills to its backlog, so the slot goes on confirming and the WAL it
// retains does not grow with the blackout; the other endpoints receive everything meanwhile;
// after the thaw the blacked-out endpoint receives every event, in order per aggregate, and its
// backlog empties.
func TestEndpointBlackoutSpillsAndRejoins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	partners := make([]*partner, 20)
	for i := range partners {
		tenant := fmt.Sprintf("t%d", i)
		partners[i] = newPartner(t, fmt.Sprintf("iso%02d", i), func(tn, _, _ string) bool { return tn == tenant })
		e.addPartner(partners[i], endpoints.Endpoint{TenantID: tenant})
	}
	victim, others := partners[7], slices.Delete(slices.Clone(partners), 7, 8)
	r := e.start(func(c *Config) {
		endpointsConfig(c)
		c.SpillAfter, c.StatusInterval = time.Second, 500*time.Millisecond
	})
	defer func() { _ = r.stop(t) }()
	w := e.steadyWrite(partners, 200, 400)
	time.Sleep(3 * time.Second)

	victim.recv.Hang()
	const blackout = 24 * time.Second
	time.Sleep(blackout / 2)
	midRetained, midCurrent := e.lag()
	time.Sleep(blackout / 2)
	endRetained, endCurrent := e.lag()
	confirmed := endCurrent - endRetained
	t.Logf("retained WAL: %d bytes mid-blackout, %d at its end; %d bytes written in between", midRetained, endRetained,
		endCurrent-midCurrent)
	// A slot held by the blacked-out endpoint would stay before the blackout's first event:
	// retained WAL would grow by all that was written. Spilled, it stays put (half is the margin).
	if confirmed < midCurrent {
		t.Fatalf("at the blackout's end the slot confirmed %d, not past the mid-blackout position %d: the blacked-out endpoint holds it",
			confirmed, midCurrent)
	}
	if grew := endRetained - midRetained; grew > (endCurrent-midCurrent)/2 {
		t.Fatalf("retained WAL grew by %d bytes over the blackout's second half (%d written): it grows with the blackout", grew,
			endCurrent-midCurrent)
	}
	// The others got everything written so far, during the blackout.
	for _, p := range others {
		if rep := waitAll(t, p.recv, w.written(p), time.Minute); len(rep.Lost) > 0 {
			t.Fatalf("endpoint %s lost %d events during the blackout: %v", p.id, len(rep.Lost), first(rep.Lost))
		}
	}
	if n := e.backlogCount(victim.id); n == 0 {
		t.Fatal("the blacked-out endpoint's backlog is empty at the blackout's end")
	}
	for _, p := range others {
		if n := e.backlogCount(p.id); n != 0 {
			t.Fatalf("healthy endpoint %s has %d events in its backlog", p.id, n)
		}
	}

	victim.recv.Unhang()
	time.Sleep(3 * time.Second)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, partners...)
	waitFor(t, time.Minute, "the blacked-out endpoint's backlog emptied", func() bool { return e.backlogCount(victim.id) == 0 })
	t.Logf("the blacked-out endpoint received %d events (%d requests) after a %s blackout", len(victim.want.Committed),
		victim.recv.Requests(), blackout)
}

// endpointsProcess starts the relay binary with --endpoints against this env (no webhook).
func (e *env) endpointsProcess(args ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(e.t), append([]string{"run", "--endpoints", "--slot", e.slot, "--publication",
		"pub_" + e.slot, "--metrics-addr", "", "--retry-min", "10ms", "--retry-max", "200ms", "--log-format", "json",
		"--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	cmd.Stderr = testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// The relay process SIGKILLed while a blacked-out endpoint drains its backlog after the thaw:
// the next process drains the rest; the endpoint still receives every event, in order per
// aggregate (first deliveries), and the backlog empties; the others lose nothing either.
func TestEndpointBacklogDrainSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	partners := make([]*partner, 5)
	for i := range partners {
		tenant := fmt.Sprintf("t%d", i)
		partners[i] = newPartner(t, fmt.Sprintf("kill%d", i), func(tn, _, _ string) bool { return tn == tenant })
		e.addPartner(partners[i], endpoints.Endpoint{TenantID: tenant})
	}
	victim, others := partners[0], partners[1:]
	args := []string{"--spill-after", "1s", "--status-interval", "500ms"}
	cmd := e.endpointsProcess(args...)
	e.waitSlot()
	victim.recv.Hang()
	e.write("big", tenantEvents{"t0", "order", "order.created", 40, 50}, partners)
	for i := range others {
		e.write(fmt.Sprintf("o%d", i), tenantEvents{fmt.Sprintf("t%d", i+1), "order", "order.created", 10, 10}, partners)
	}
	waitPartners(t, others...)
	owed := e.currentLSN()
	waitFor(t, time.Minute, "the slot confirmed past the blacked-out endpoint's events", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= owed && e.backlogCount(victim.id) > 0
	})
	spilled := e.backlogCount(victim.id)
	// Thawed but slow, so that the kill lands mid-drain.
	victim.recv.SetFail(func(*http.Request) int { time.Sleep(3 * time.Millisecond); return 0 })
	victim.recv.Unhang()
	waitFor(t, time.Minute, "the drain under way", func() bool { return victim.recv.Unique() >= len(victim.want.Committed)/4 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	got, left := victim.recv.Unique(), e.backlogCount(victim.id)
	t.Logf("%d events spilled; SIGKILL after %d of %d delivered, %d left in the backlog", spilled, got, len(victim.want.Committed), left)
	if left == 0 {
		t.Fatal("the backlog was empty at the kill: the drain was not under way")
	}
	e.write("down", tenantEvents{"t0", "order", "order.created", 10, 5}, partners)
	cmd = e.endpointsProcess(args...)
	e.write("after", tenantEvents{"t0", "order", "order.created", 10, 5}, partners)
	waitPartners(t, partners...)
	waitFor(t, time.Minute, "the backlog emptied", func() bool { return e.backlogCount(victim.id) == 0 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
	}
}
