package publisher

import (
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/memstore"
)

// Unit tests of the engine's parts that the simulation (sim_test.go) drives only as a whole:
// the rate limit's window, the backoff, the config's zero values, a batch's split, a lane's
// keyed queues and batch former.

// No window of length per sees more than n starts, and a start is let through once the oldest
// of the last n is a full window old (the positive control).
func TestWindowLimiterBoundsEveryWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newWindowLimiter(3, time.Second)
	for i, ms := range []int{0, 100, 200} {
		if wait := l.try(t0.Add(time.Duration(ms) * time.Millisecond)); wait != 0 {
			t.Fatalf("start %d within the limit waits %s", i, wait)
		}
	}
	if wait := l.try(t0.Add(300 * time.Millisecond)); wait != 700*time.Millisecond {
		t.Fatalf("a 4th start in the window waits %s, want 700ms (until the 1st is a second old)", wait)
	}
	if wait := l.try(t0.Add(time.Second)); wait != 0 {
		t.Fatalf("a start a second after the 1st waits %s", wait)
	}
	if wait := l.try(t0.Add(time.Second + 50*time.Millisecond)); wait != 50*time.Millisecond {
		t.Fatalf("the next waits %s, want 50ms (until the 2nd is a second old)", wait)
	}
}

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	lo, hi := time.Second, 10*time.Minute
	for n := 1; n <= 30; n++ {
		base := min(lo<<min(n-1, 20), hi)
		low, high := backoff(n, lo, hi, func() float64 { return 0 }), backoff(n, lo, hi, func() float64 { return 0.999999 })
		if low != time.Duration(float64(base)*0.8) {
			t.Fatalf("attempt %d: lowest %v, want 80%% of %v", n, low, base)
		}
		if want := min(time.Duration(float64(base)*1.199), hi); high > hi || high < want {
			t.Fatalf("attempt %d: highest %v, want about 120%% of %v, at most %v", n, high, base, hi)
		}
	}
}

// A destination's asked delay (an HTTP Retry-After, as the webhook parses it) is taken as
// asked up to RetryMax; without one, the backoff applies.
func TestNextDelayTakesTheAskedDelayUpToTheCap(t *testing.T) {
	lo, hi := time.Second, time.Minute
	half := func() float64 { return 0.5 }
	if d := nextDelay(1, 7*time.Second, lo, hi, half); d != 7*time.Second {
		t.Fatalf("asked 7s: %v", d)
	}
	if d := nextDelay(1, time.Hour, lo, hi, half); d != hi {
		t.Fatalf("not capped: %v", d)
	}
	if d := nextDelay(1, 0, lo, hi, half); d != lo {
		t.Fatalf("no asked delay should fall back to the backoff: %v", d)
	}
}

// A library caller's zero values mean what the CLI's and the pipelines file's defaults mean:
// a batch lingers 5ms, MaxAttempts 0 is about a day of retries (5 for a shadow), and only a
// negative value retries forever or sends at once.
func TestZeroValuesAreTheSettingsDefaults(t *testing.T) {
	var c Config
	c.Batch.MaxEvents = 10
	c.defaults()
	if c.Batch.Linger != settings.BatchLinger || c.Batch.MaxBytes != settings.BatchMaxBytes {
		t.Errorf("zero batch linger and max bytes = %s, %d; want %s, %d (as --batch-linger, --batch-max-bytes)",
			c.Batch.Linger, c.Batch.MaxBytes, settings.BatchLinger, settings.BatchMaxBytes)
	}
	if want := settings.AttemptsForADay(settings.RetryMin, settings.RetryMax); c.MaxAttempts != want || want < 100 {
		t.Errorf("zero MaxAttempts = %d; want about a day of retries, %d (as --max-attempts 0)", c.MaxAttempts, want)
	}
	if c.Pipeline != DefaultPipeline {
		t.Errorf("zero Pipeline = %q", c.Pipeline)
	}
	for _, tc := range []struct {
		name     string
		in       Config
		attempts int
		linger   time.Duration
	}{
		{"shadow", Config{Shadow: true}, settings.ShadowMaxAttempts, settings.BatchLinger},
		{"forever", Config{MaxAttempts: -1}, -1, settings.BatchLinger},
		{"no linger", Config{MaxAttempts: 3, Batch: Batch{Linger: NoLinger}}, 3, NoLinger},
	} {
		tc.in.defaults()
		if tc.in.MaxAttempts != tc.attempts || tc.in.Batch.Linger != tc.linger {
			t.Errorf("%s: MaxAttempts %d, linger %s; want %d, %s", tc.name, tc.in.MaxAttempts, tc.in.Batch.Linger, tc.attempts, tc.linger)
		}
	}
}

// testLane is the one lane of an engine with no destination, at a fixed time.
func testLane(t *testing.T, maxInFlight int, batching Batch) (*engine, *lane) {
	t.Helper()
	e := newEngine(engineConfig{pipeline: "p"}, zerolog.Nop(), newPublisherMetrics(nil), nopAcker{}, nil,
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func() float64 { return 0.5 })
	l := e.single
	l.active, l.maxInFlight, l.batching, l.breaker = true, maxInFlight, batching, false
	l.batching.defaults()
	return e, l
}

type nopAcker struct{}

func (nopAcker) Ack(*cdc.Tx, *envelope.Message)    {}
func (nopAcker) AckControl(*cdc.Tx)                {}
func (nopAcker) Grow(*cdc.Tx, []*envelope.Message) {}

// queue adds events named like "a1" (aggregate a, its 1st event) to l, in this order.
func queue(e *engine, l *lane, names ...string) {
	for _, n := range names {
		m := &envelope.Message{ID: n, AggregateType: "t", AggregateID: n[:1], Payload: []byte("{}")}
		l.add(e.newItem(m, &cdc.Tx{}, kindLive))
	}
}

func ids(b *batch) string {
	if b == nil {
		return "none"
	}
	s := ""
	for _, it := range b.items {
		s += it.m.ID + " "
	}
	return s
}

// Only an aggregate's head may start, one attempt per aggregate at a time; its next event
// becomes startable once it is delivered. Aggregates go side by side up to the lane's cap.
func TestLaneStartsOneHeadPerAggregateInOrder(t *testing.T) {
	e, l := testLane(t, 2, Batch{})
	queue(e, l, "a1", "a2", "b1", "c1")
	first, second := l.take(), l.take()
	if ids(first) != "a1 " || ids(second) != "b1 " {
		t.Fatalf("took %s and %s, want a1 and b1", ids(first), ids(second))
	}
	if b := l.take(); b != nil {
		t.Fatalf("took %s beyond the cap of 2", ids(b))
	}
	first.start()
	l.finished(first)
	l.done(first)
	if b := l.take(); ids(b) != "c1 " {
		t.Fatalf("after a1 was delivered took %s, want c1 (ready before a2)", ids(b))
	}
	if b := l.take(); b != nil {
		t.Fatalf("took %s beyond the cap", ids(b))
	}
	second.start()
	l.finished(second)
	l.done(second)
	if b := l.take(); ids(b) != "a2 " {
		t.Fatalf("took %s, want a2 once a1 is delivered", ids(b))
	}
}

// A batch takes each aggregate's queued events as a prefix, heads first, up to MaxEvents; an
// aggregate is in one batch at a time.
func TestLaneBatchesPrefixesOfEachAggregate(t *testing.T) {
	e, l := testLane(t, 4, Batch{MaxEvents: 3, Linger: NoLinger})
	queue(e, l, "a1", "a2", "b1", "b2", "c1")
	if b := l.take(); ids(b) != "a1 b1 c1 " {
		t.Fatalf("first batch %s, want the three heads", ids(b))
	}
	if b := l.take(); b != nil {
		t.Fatalf("second batch %s: a, b and c are in the first", ids(b))
	}
	e2, l2 := testLane(t, 4, Batch{MaxEvents: 3, Linger: NoLinger})
	queue(e2, l2, "a1", "a2", "a3", "a4", "b1")
	if b := l2.take(); ids(b) != "a1 a2 b1 " {
		t.Fatalf("batch %s, want the heads a1 and b1, a2 behind a1 (a prefix of a)", ids(b))
	}
}

// A failing batch of several aggregates splits between aggregates, as near the middle as it
// can; one of a single aggregate splits in the middle, its second half waiting for the first.
func TestBatchSplitsBetweenAggregatesThenWithinOne(t *testing.T) {
	e, _ := testLane(t, 4, Batch{})
	mk := func(names ...string) *batch {
		b := &batch{}
		for _, n := range names {
			m := &envelope.Message{ID: n, AggregateType: "t", AggregateID: n[:1]}
			b.items = append(b.items, e.newItem(m, &cdc.Tx{}, kindLive))
		}
		return b
	}
	left, right, chained := mk("a1", "a2", "b1", "b2", "b3").split()
	if ids(left) != "a1 a2 " || ids(right) != "b1 b2 b3 " || chained || left.after != nil {
		t.Fatalf("split of two aggregates: %s | %s (chained %v)", ids(left), ids(right), chained)
	}
	left, right, chained = mk("a1", "a2", "a3", "a4").split()
	if ids(left) != "a1 a2 " || ids(right) != "a3 a4 " || !chained || left.after != right {
		t.Fatalf("split of one aggregate: %s | %s (chained %v, after %v)", ids(left), ids(right), chained, left.after == right)
	}
}

// Items sort into stream order by their position, then by the order they were made in.
func TestSortItemsIsStreamOrder(t *testing.T) {
	e, _ := testLane(t, 1, Batch{})
	var its []*item
	for _, p := range []struct {
		id       string
		lsn, idx uint64
	}{{"c", 3, 0}, {"a", 1, 0}, {"b2", 2, 1}, {"b1", 2, 0}, {"b1'", 2, 0}} {
		m := &envelope.Message{ID: p.id, AggregateType: "t", AggregateID: "a", Sequence: envelope.Sequence(p.lsn, int(p.idx))}
		its = append(its, e.newItem(m, &cdc.Tx{}, kindLive))
	}
	sortItems(its)
	got := ""
	for _, it := range its {
		got += it.m.ID + " "
	}
	if got != "a b1 b1' b2 c " {
		t.Fatalf("sorted: %s", got)
	}
}

// A transaction's endpoint changes are carried out before its first event, in their order; its
// replays stay at their places among the events; a transaction in that order already is taken
// as it is (no copy).
func TestControlsInOrderPutsEndpointChangesFirst(t *testing.T) {
	ep := func(id string, at int) cdc.Control {
		return cdc.Control{At: at, Endpoint: &cdc.EndpointChange{Op: cdc.EndpointUpsert, ID: id}}
	}
	replay := func(p string, at int) cdc.Control {
		return cdc.Control{At: at, Replay: &cdc.ReplayRequest{Pipeline: p}}
	}
	describe := func(cs []cdc.Control) string {
		s := ""
		for _, c := range cs {
			if c.Endpoint != nil {
				s += c.Endpoint.ID
			} else {
				s += c.Replay.Pipeline
			}
			s += "@" + string(rune('0'+c.At)) + " "
		}
		return s
	}
	for _, tc := range []struct {
		name string
		in   []cdc.Control
		want string
	}{
		{"after an event (signup: the event, then the endpoint)", []cdc.Control{ep("a", 1)}, "a@0 "},
		{"several, between events", []cdc.Control{ep("a", 1), ep("b", 3), ep("a", 3)}, "a@0 b@0 a@0 "},
		{"a replay stays at its place", []cdc.Control{replay("r", 1), ep("a", 2)}, "a@0 r@1 "},
		{"already first", []cdc.Control{ep("a", 0), replay("r", 2)}, "a@0 r@2 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]cdc.Control(nil), tc.in...)
			got := controlsInOrder(in)
			if d := describe(got); d != tc.want {
				t.Fatalf("got %s, want %s", d, tc.want)
			}
			if d := describe(in); d != describe(tc.in) {
				t.Fatalf("the transaction's own records changed: %s", d)
			}
		})
	}
	ordered := []cdc.Control{ep("a", 0), replay("r", 1)}
	if got := controlsInOrder(ordered); &got[0] != &ordered[0] {
		t.Fatal("a transaction in order already was copied")
	}
}

// An endpoint's limits split among shards: the shares of a limit sum to it (each at least 1),
// and the shards' rate limiters, each saturated on its own, together start at most the
// endpoint's rate_limit in any 10 s (with a rate below the shards' count, one more per shard),
// and no less than it (the positive control: the split does not starve the endpoint).
func TestLimitsSplitAmongShards(t *testing.T) {
	for _, shards := range []int{1, 2, 3, 4, 8} {
		for _, n := range []int{1, 2, 3, 5, 7, 10, 33, 100} {
			sum := 0
			for i := range shards {
				sum += shareOf(n, i, shards)
			}
			if want := max(n, shards); sum != want && shards > 1 || shards == 1 && sum != n {
				t.Fatalf("max_in_flight %d over %d shards: shares sum to %d, want %d", n, shards, sum, want)
			}
			var starts []time.Duration
			const span = 30 * time.Second
			for i := range shards {
				k, per := rateShare(n, i, shards)
				l := newWindowLimiter(k, per)
				t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				for at := time.Duration(0); at < span; {
					if wait := l.try(t0.Add(at)); wait > 0 {
						at += wait
						continue
					}
					starts = append(starts, at)
				}
			}
			slices.Sort(starts)
			bound := 10 * n
			if n < shards {
				bound += shards
			}
			for i, j := 0, 0; i < len(starts); i++ {
				for j < len(starts) && starts[j] < starts[i]+10*time.Second {
					j++
				}
				if j-i > bound {
					t.Fatalf("rate_limit %d over %d shards: %d starts in the 10s from %s, want at most %d", n, shards, j-i, starts[i], bound)
				}
			}
			if len(starts) < 29*n {
				t.Fatalf("rate_limit %d over %d shards: %d starts in 30s, want about %d", n, shards, len(starts), 30*n)
			}
		}
	}
}

// A lane writes its parks one at a time, in the order it decided them: a park decided while
// another is being written waits for it, and goes with the others decided meanwhile in the next
// write. Written side by side, the later could land first and a relay dying in between would
// leave an aggregate parked with a hole, whose replay sends the missing event after later ones
// (simulation seed 7237). The positive control: once the first write is done, the next goes.
func TestLaneWritesItsParksInOrder(t *testing.T) {
	e, l := testLane(t, 1, Batch{})
	db := memstore.New(func() time.Time { return e.now })
	l.store = db.Pipeline("p", false)
	var its []*item
	for i, n := range []string{"a2", "a3", "a4"} {
		m := &envelope.Message{ID: n, AggregateType: "t", AggregateID: "a", Payload: []byte("{}"),
			Sequence: envelope.Sequence(0x1000, i)}
		db.Insert(m)
		its = append(its, e.newItem(m, &cdc.Tx{}, kindLive))
	}
	settled := ""
	for _, it := range its {
		e.parkNow(l, []*item{it}, func() { settled += it.m.ID + " " })
	}
	first := parkWrites(t, e)
	if len(first) != 1 {
		t.Fatalf("%d park writes under way at once, want 1 (the first; the others wait for it)", len(first))
	}
	if got := parkedIn(t, l); got != "" {
		t.Fatalf("parked before any write ran: %q", got)
	}
	run(t, e, first[0])
	if got := parkedIn(t, l); got != "a2 " || settled != "a2 " {
		t.Fatalf("after the first write: parked %q, settled %q; want a2 alone", got, settled)
	}
	next := parkWrites(t, e)
	if len(next) != 1 {
		t.Fatalf("after the first write was done: %d park writes, want 1 with both that waited", len(next))
	}
	run(t, e, next[0])
	if got := parkedIn(t, l); got != "a2 a3 a4 " || settled != "a2 a3 a4 " {
		t.Fatalf("after the second write: parked %q, settled %q; want a2 a3 a4", got, settled)
	}
	if l.parkOps != 0 || l.parking || len(l.parks) != 0 {
		t.Fatalf("parks still counted: parkOps %d, parking %v, waiting %d", l.parkOps, l.parking, len(l.parks))
	}
}

// parkWrites drains the engine's effects, which must all be park writes.
func parkWrites(t *testing.T, e *engine) []*op {
	t.Helper()
	var ops []*op
	for _, ef := range e.drain() {
		if ef.op == nil || ef.op.what != "park events" {
			t.Fatalf("unexpected effect %+v", ef)
		}
		ops = append(ops, ef.op)
	}
	return ops
}

// run runs a store operation and hands its result to the engine, as the driver does.
func run(t *testing.T, e *engine, o *op) {
	t.Helper()
	v, err := o.run(t.Context())
	if err != nil {
		t.Fatalf("%s: %v", o.what, err)
	}
	e.opDone(o, v, nil, false, e.now)
}

// parkedIn lists what is parked of aggregate t/a in l's store.
func parkedIn(t *testing.T, l *lane) string {
	t.Helper()
	ms, err := l.store.Replayable(t.Context(), store.Aggregate{Type: "t", ID: "a"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, m := range ms {
		s += m.ID + " "
	}
	return s
}
