package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape reads one unlabelled series from a relay process's /metrics; -1 if it cannot.
func scrape(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// The relay's own series carry the pipeline label; these tests run the default pipeline.
		line := strings.Replace(sc.Text(), `{pipeline="default"}`, "", 1)
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// readyz returns a relay process's /readyz status code and body.
func readyz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// steady commits small batches, each of its own aggregate type (so each checks its own order),
// until stop; a batch started after the pause was seen is recorded as such.
type steady struct {
	mu       sync.Mutex
	all      relaytest.Result
	after    []string // ids of batches begun after paused was set
	paused   atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	finished chan struct{}
}

func (e *env) steady() *steady {
	s := &steady{stop: make(chan struct{}), finished: make(chan struct{})}
	e.t.Cleanup(func() { s.end() })
	go func() {
		defer close(s.finished)
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			default:
			}
			after := s.paused.Load()
			res, err := relaytest.Produce(context.Background(), e.pool,
				relaytest.Workload{Events: 30, Aggregates: 6, MaxTxSize: 4, Type: fmt.Sprintf("s%d", i)})
			if err != nil {
				e.t.Error(err)
				return
			}
			s.mu.Lock()
			s.all.Committed = append(s.all.Committed, res.Committed...)
			if after {
				for _, c := range res.Committed {
					s.after = append(s.after, c.ID)
				}
			}
			s.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return s
}

// end stops the writer (idempotent) and returns everything it committed.
func (s *steady) end() relaytest.Result {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.finished
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

// afterPause returns the ids committed after the pause was seen.
func (s *steady) afterPause() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.after...)
}

func (e *env) noneDelivered(ids []string) {
	e.t.Helper()
	for _, id := range ids {
		if e.recv.Has(id) {
			e.t.Fatalf("event %s, committed after the pause was obeyed, was delivered while paused", id)
		}
	}
}

// Pause during a steady stream, through the database: the leader stops sending, a standby that
// takes over after the leader is SIGKILLed stays paused (it holds the events, and sends none),
// /readyz stays 200 and outbox_relay_pipeline_paused is 1; after resume everything arrives, in
// order per aggregate.
func TestPauseHoldsDeliveryAcrossLeaderSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	addrA, addrB := freeAddr(t), freeAddr(t)
	leader := e.process("--metrics-addr", addrA)
	waitFor(t, 30*time.Second, "leader streaming", func() bool { return scrape(addrA, "outbox_relay_streaming") == 1 })
	standby := e.process("--metrics-addr", addrB)
	waitFor(t, 30*time.Second, "standby standing by", func() bool { return scrape(addrB, "outbox_relay_streaming") == 0 })
	defer func() { _ = standby }()

	s := e.steady()
	waitFor(t, 30*time.Second, "steady stream delivered", func() bool { return e.recv.Unique() >= 100 })
	if _, err := control.SetPaused(ctx, e.pool, "", publisher.DefaultPipeline, true, "test maintenance"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leader paused", func() bool { return scrape(addrA, "outbox_relay_pipeline_paused") == 1 })
	s.paused.Store(true)
	// Positive control: the leader has events committed after the pause in hand.
	waitFor(t, 30*time.Second, "leader holding events", func() bool {
		return len(s.afterPause()) >= 60 && scrape(addrA, "outbox_relay_buffered_events") >= 60
	})
	e.noneDelivered(s.afterPause())
	if code, body := readyz(addrA); code != http.StatusOK || !strings.Contains(body, "paused") {
		t.Fatalf("paused leader /readyz: %d %q, want 200 paused", code, body)
	}

	if err := leader.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.Wait()
	waitFor(t, 60*time.Second, "standby took over", func() bool { return scrape(addrB, "outbox_relay_streaming") == 1 })
	waitFor(t, 30*time.Second, "new leader holding the events", func() bool {
		return scrape(addrB, "outbox_relay_buffered_events") >= float64(len(s.afterPause()))
	})
	e.noneDelivered(s.afterPause())
	if scrape(addrB, "outbox_relay_pipeline_paused") != 1 {
		t.Fatal("the standby that took over is not paused")
	}
	if code, body := readyz(addrB); code != http.StatusOK || !strings.Contains(body, "paused") {
		t.Fatalf("paused new leader /readyz: %d %q, want 200 paused", code, body)
	}
	held := len(s.afterPause())

	if _, err := control.SetPaused(ctx, e.pool, "", publisher.DefaultPipeline, false, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "resumed", func() bool { return scrape(addrB, "outbox_relay_pipeline_paused") == 0 })
	res := s.end()
	requireOK(t, e.waitDelivered(res, 2*time.Minute))
	t.Logf("%d events committed, %d of them while paused", len(res.Committed), held)
}

// goneFor answers 410 Gone to every request that carries an event of aggregate order/7 (alone
// or in a batch) while on is set.
func (e *env) goneFor(on *atomic.Bool) {
	e.recv.SetFailEvents(func(ds []relaytest.Delivery) int {
		for _, d := range ds {
			if on.Load() && d.Aggregate == poisonAgg {
				return http.StatusGone
			}
		}
		return 0
	})
}

// A 410 Gone pauses the pipeline durably, logs an error naming `outbox-relay resume`, and leaves
// the event undelivered, not dead-lettered and not parked, though MaxAttempts is small; after
// resume it and everything behind it arrive in order.
//
// Batched, the same: a batch answered 410 waits as formed, and nothing else is sent meanwhile.
func TestGonePausesThePipeline(t *testing.T) {
	t.Parallel()
	t.Run("one per request", func(t *testing.T) { testGonePauses(t, false) })
	t.Run("batch 20", func(t *testing.T) { testGonePauses(t, true) })
}

func testGonePauses(t *testing.T, batched bool) {
	e := newEnv(t)
	var gone atomic.Bool
	gone.Store(true)
	e.goneFor(&gone)
	var logs relaytest.SyncBuffer
	cfg := e.config()
	deadLetterConfig(&cfg)
	if batched {
		batchConfig(&cfg)
	}
	cfg.Logger = zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	r := e.startWith(cfg)
	defer r.stop(t)
	ctx := context.Background()

	// 100 events over 10 aggregates: order/7 has some (40 left it without any in about one run
	// of 70, and then nothing answered 410).
	first := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 3})
	if poisonCount(first) == 0 {
		t.Fatalf("the workload has no event of %s: nothing can answer 410", poisonAgg)
	}
	waitFor(t, 30*time.Second, "paused by the 410", func() bool { return r.metric(t, "outbox_relay_pipeline_paused") == 1 })
	c, err := control.ReadPause(ctx, e.pool, "", publisher.DefaultPipeline)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "pause recorded", func() bool {
		c, err = control.ReadPause(ctx, e.pool, "", publisher.DefaultPipeline)
		return err == nil && c.Paused
	})
	if !strings.Contains(c.Reason, "410 Gone") {
		t.Fatalf("pause reason %q does not say 410 Gone", c.Reason)
	}
	waitFor(t, 10*time.Second, "error logged", func() bool { return strings.Contains(logs.String(), "outbox-relay resume") })
	gone.Store(false) // the endpoint is back, but the pipeline stays paused until resume
	second := e.produce(relaytest.Workload{Events: 20, Aggregates: 10, MaxTxSize: 2, Type: "invoice"})
	waitFor(t, 30*time.Second, "held events buffered", func() bool {
		return r.metric(t, "outbox_relay_buffered_events") >= float64(len(second.Committed))
	})
	for _, ev := range second.Committed {
		if e.recv.Has(ev.ID) {
			t.Fatalf("event %s delivered while paused", ev.ID)
		}
	}
	if n := e.statusCounts(poisonAgg); n["failed"]+n["parked"] > 0 {
		t.Fatalf("the 410 dead-lettered or parked events: %v", n)
	}
	if r.metric(t, "outbox_relay_events_dead_lettered_total") != 0 {
		t.Fatal("a 410 counted as a dead letter")
	}

	if _, err := control.SetPaused(ctx, e.pool, "", publisher.DefaultPipeline, false, ""); err != nil {
		t.Fatal(err)
	}
	all := relaytest.Result{Committed: append(first.Committed, second.Committed...)}
	requireOK(t, e.waitDelivered(all, 30*time.Second))
	if n := e.statusCounts(poisonAgg); n["failed"]+n["parked"] > 0 {
		t.Fatalf("events of %s failed or parked: %v", poisonAgg, n)
	}
	if batched {
		requireBatched(t, e.recv.RequestLog())
	}
}

// on_gone retry keeps the old behaviour: a 410 is a failed attempt, dead-lettered after
// MaxAttempts, and nothing pauses.
func TestGoneRetryDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var gone atomic.Bool
	gone.Store(true)
	e.goneFor(&gone)
	r := e.start(func(c *Config) { deadLetterConfig(c); c.Control.OnGone = publisher.GoneRetry })
	defer r.stop(t)
	res := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 3})
	if poisonCount(res) == 0 {
		t.Fatalf("the workload has no event of %s: nothing can answer 410", poisonAgg)
	}
	waitFor(t, 30*time.Second, "dead letter", func() bool { return e.statusCounts(poisonAgg)["failed"] == 1 })
	if r.metric(t, "outbox_relay_pipeline_paused") != 0 {
		t.Fatal("paused although on_gone is retry")
	}
	requireOK(t, e.waitDelivered(e.others(res), 30*time.Second))
}

// Paused with a backlog larger than the buffer: reading WAL stops once the buffer is full (the
// memory stays bounded), nothing is delivered, the slot confirms nothing of the backlog, and
// /readyz stays 200 although events wait longer than the stall timeout; after resume everything
// arrives in order and the slot moves on.
func TestPauseBoundsTheBufferAndHoldsTheSlot(t *testing.T) {
	// Not parallel: compares the slot's confirmed position with the cluster's WAL position, which other tests move while they run.
	e := newEnv(t)
	const maxEvents = 200
	var addr atomic.Value
	r := e.start(func(c *Config) {
		withHTTP(&addr)(c)
		c.MaxBufferedEvents = maxEvents
		c.StallTimeout = time.Second
	})
	defer r.stop(t)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "running", func() bool { return r.metric(t, "outbox_relay_pipeline_paused") == 0 })
	if _, err := control.SetPaused(ctx, e.pool, "", publisher.DefaultPipeline, true, "bounded"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "paused", func() bool { return r.metric(t, "outbox_relay_pipeline_paused") == 1 })
	before, _ := e.slotLSNs()
	res := e.produce(relaytest.Workload{Events: 3000, Aggregates: 30, MaxTxSize: 10})
	waitFor(t, 15*time.Second, "reading stopped on a full buffer", func() bool { return r.metric(t, "outbox_relay_read_paused") == 1 })
	if got := r.metric(t, "outbox_relay_events_received_total"); got > maxEvents+10 {
		t.Fatalf("received %v events with a %d-event buffer while paused", got, maxEvents)
	}
	if n := e.recv.Unique(); n != 0 {
		t.Fatalf("%d events delivered while paused", n)
	}
	if confirmed, _ := e.slotLSNs(); confirmed > before {
		t.Fatalf("slot confirmed %d > %d while paused with the backlog undelivered", confirmed, before)
	}
	waitFor(t, 10*time.Second, "older than the stall timeout", func() bool {
		return r.metric(t, "outbox_relay_oldest_undelivered_seconds") > 1.5
	})
	if code, body := get(t, &addr, "/readyz"); code != 200 || !strings.Contains(body, "paused: bounded") {
		t.Fatalf("/readyz while paused: %d %q", code, body)
	}

	if _, err := control.SetPaused(ctx, e.pool, "", publisher.DefaultPipeline, false, ""); err != nil {
		t.Fatal(err)
	}
	requireOK(t, e.waitDelivered(res, time.Minute))
	waitFor(t, 30*time.Second, "slot moves on", func() bool { c, _ := e.slotLSNs(); return c > before })
}
