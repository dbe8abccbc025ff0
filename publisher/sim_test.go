package publisher

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/memstore"
)

// The deterministic simulation: the whole engine on the in-memory stores, driven by a seeded
// event queue with a fake clock, against a simulated stream (a log of committed transactions
// with LSNs, a slot whose confirmed position moves only by the tracker's confirmation) and
// simulated destinations. Everything that is concurrent in production (attempts, store
// operations, the stream, timers) is an event at a time the seed chooses, and so are the faults:
// destinations that fail, hang, answer 410 and 429; store writes that fail and are retried;
// endpoint changes at commits; pause and resume; replays; the leading process killed at any
// step, or cut off from the slot while it goes on delivering what it holds, and a standby that
// takes over from the stores' state and the slot's confirmed position. Every run checks the
// invariants the torture checks (sim_check_test.go). A seed that fails reproduces exactly: the
// only inputs are the seed, and the engine is deterministic.
//
//	go test ./publisher -run TestSimulation -args -sim.seeds 20000           (make simulate SEEDS=20000)
//	go test ./publisher -run TestSimulation -v -args -sim.seed 1234 -sim.trace t.txt  (make simulate SEED=1234)

var (
	simSeeds = flag.Int("sim.seeds", 2000, "how many seeds TestSimulation runs (from -sim.from)")
	simFrom  = flag.Uint64("sim.from", 1, "the first seed TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run this one seed and print its trace")
	simTrace = flag.String("sim.trace", "", "write the trace of a failing (or -sim.seed) run to this file")
	simRows  = flag.Bool("sim.rows", false, "check that no row is left pending that no endpoint owes (checkRowsDone)")
)

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		w := runSim(*simSeed, true)
		t.Logf("seed %d: %s", *simSeed, w.summary())
		writeTrace(t, w)
		if len(w.fails) > 0 {
			t.Fatalf("seed %d:\n%s", *simSeed, strings.Join(w.fails, "\n"))
		}
		return
	}
	n := *simSeeds
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "sim.seeds" })
	switch {
	case given:
	case testing.Short():
		n = min(n, 200)
	case raceEnabled:
		n = min(n, 100) // make test runs the 2,000 without the race detector
	}
	var total simTotals
	for i := range uint64(n) {
		seed := *simFrom + i
		w := runSim(seed, false)
		total.add(w)
		if len(w.fails) > 0 {
			w = runSim(seed, true) // again, with the whole trace
			writeTrace(t, w)
			t.Fatalf("seed %d fails (replay it: make simulate SEED=%d):\n%s\n\nlast steps:\n%s", seed, seed,
				strings.Join(w.fails, "\n"), w.trace.tail(60))
		}
	}
	t.Logf("%d seeds from %d: %s", n, *simFrom, total)
}

// A seed replays exactly: two runs of the same seed take the same steps.
func TestSimulationReplaysASeedExactly(t *testing.T) {
	for _, seed := range []uint64{3, 77, 1001, 4242} {
		a, b := runSim(seed, true), runSim(seed, true)
		if a.trace.hash() != b.trace.hash() || len(a.trace.lines) < 100 {
			t.Fatalf("seed %d: two runs differ (%d and %d steps): the engine or the simulation depends on something "+
				"besides the seed (map order, the real clock)", seed, len(a.trace.lines), len(b.trace.lines))
		}
	}
}

func writeTrace(t *testing.T, w *world) {
	if *simTrace == "" {
		return
	}
	if err := os.WriteFile(*simTrace, []byte(strings.Join(w.trace.lines, "\n")+"\n"), 0o644); err != nil {
		t.Error(err)
	}
}

// simOpts are a run's settings, drawn from its seed.
type simOpts struct {
	endpoints   bool          // partner endpoints (else one destination)
	backlog     bool          // a backlog off the WAL
	batch       int           // the one destination's batch size (1: none)
	maxAttempts int           // dead letters after this many (0: never)
	shadow      bool          // a shadow pipeline: it abandons after maxAttempts instead
	workers     int           // the engine's workers
	spillAfter  time.Duration // the pipeline's spill_after
	disable     time.Duration // the endpoints' disable_after (negative: never)
	workload    time.Duration // how long the writers write
	faults      float64       // how often faults come, per second
}

func drawOpts(r *rand.Rand) simOpts {
	o := simOpts{endpoints: r.IntN(3) > 0, backlog: r.IntN(3) > 0, batch: 1, workers: 2 + r.IntN(8),
		spillAfter: time.Duration(200+r.IntN(1500)) * time.Millisecond, disable: -1,
		workload: time.Duration(5+r.IntN(20)) * time.Second, faults: 0.2 + 2*r.Float64()}
	if r.IntN(3) == 0 {
		o.batch = 2 + r.IntN(6)
	}
	// A pipeline with endpoints always has its backlog (the relay gives it one): without it, the
	// events of a paused endpoint fill the buffer and the change that resumes it, which comes
	// through the stream, is never read.
	o.backlog = o.backlog || o.endpoints
	if r.IntN(2) == 0 {
		o.maxAttempts = 4 + r.IntN(8)
	}
	if r.IntN(4) == 0 {
		o.disable = time.Duration(3+r.IntN(10)) * time.Second
	}
	// (Drawn from what was drawn: a new draw would change every seed's run.)
	o.shadow = !o.endpoints && (o.maxAttempts == 4 || o.maxAttempts == 8)
	return o
}

// world is the simulated database, stream, destinations and relay processes of one run.
type world struct {
	seed  uint64
	rng   *rand.Rand
	now   time.Time
	start time.Time
	q     simQueue
	trace *tracer
	opts  simOpts

	db      *memstore.DB
	wal     []*walTx
	nextLSN pglogrepl.LSN
	slot    pglogrepl.LSN // the slot's confirmed position
	leader  *proc
	procs   []*proc
	procIDs int
	paused  bool // the pipeline's control row
	ending  bool // the workload is over: faults stop, everything must settle

	eps        *epModel
	recv       map[string]*receiver // by endpoint id ("": the one destination)
	deliveries []delivery
	got        map[pairKey]bool      // the deliveries' (endpoint, event) pairs, re-sends by a replay --since apart
	sinces     []simSince            // the replay --since requests committed
	abandoned  map[string]bool       // events a shadow pipeline abandoned
	gaveUp     map[string]giveUp     // when and by which process a shadow first gave each event up
	tries      map[string]int        // the most attempts a lone event had (simDest.tried)
	events     map[string]*eventInfo // every committed event, by id
	aggs       []string
	ids        int
	checked    int // the transactions whose confirmation was checked
	fails      []string
	steps      int
	stale      int // backlog entries left at the end by a relay cut off from the slot, of events delivered
	// disables counts, per endpoint, the relays' disables that changed its row; notified the
	// endpoint.disabled notifications the relays sent (at most one per disable: checkNotified).
	disables, notified map[string]int
	// spilled is when each process last wrote to each endpoint's backlog (checkGauges).
	spilled map[string]map[int]time.Time
	pairs   pairLog   // every pair's deliveries and when the log recorded one (sim_check_test.go)
	dups    dupCounts // pairs delivered again, by why that was allowed
	// losses are when a process was killed or cut off from the slot: the marks it held may be
	// lost (checkRowsDone).
	losses []time.Time
}

type walTx struct {
	commit, end pglogrepl.LSN
	at          time.Time
	events      []*envelope.Message
	controls    []cdc.Control
}

// eventInfo is what the checks need of a committed event.
type eventInfo struct {
	m   *envelope.Message
	tx  *walTx
	idx int
}

type delivery struct {
	endpoint, id string
	at           time.Time
	resent       bool // re-sent by a replay --since
	proc         int  // the relay process that sent it
}

// giveUp is when and by which relay process a shadow pipeline gave an event up.
type giveUp struct {
	proc int
	at   time.Time
}

const (
	simPipeline = "sim"
	simBuffer   = 1000            // the tracker's buffer, in events
	simTimeout  = 2 * time.Second // a hung attempt's timeout
)

func runSim(seed uint64, full bool) *world {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &world{seed: seed, rng: r, now: t0, start: t0, trace: &tracer{full: full}, abandoned: map[string]bool{}, gaveUp: map[string]giveUp{}, opts: drawOpts(r),
		recv: map[string]*receiver{}, events: map[string]*eventInfo{}, nextLSN: 0x1000, disables: map[string]int{}, notified: map[string]int{},
		spilled: map[string]map[int]time.Time{}}
	w.db = memstore.New(func() time.Time { return w.now })
	for i := range 4 + r.IntN(8) {
		w.aggs = append(w.aggs, fmt.Sprintf("a%d", i))
	}
	if w.opts.endpoints {
		w.eps = newEpModel(w)
	} else {
		w.recv[""] = &receiver{}
	}
	w.seedBackfill()
	w.tracef("opts %+v", w.opts)
	w.startProc()
	// The writers and the faults start once the first process bootstrapped the endpoints (with
	// the table as it is then: a change committed before would be in the bootstrap).
	w.schedule(time.Second, "write", w.write)
	w.schedule(100*time.Millisecond, "confirm", w.confirmStep)
	w.schedule(time.Second, "gauges", w.checkGauges)
	w.schedule(time.Second+time.Duration(w.rng.Float64()/w.opts.faults*float64(time.Second)), "fault", w.fault)
	w.schedule(w.opts.workload, "end", w.end)
	limit := t0.Add(w.opts.workload + 5*time.Minute)
	for w.q.Len() > 0 && len(w.fails) == 0 {
		ev := heap.Pop(&w.q).(*simEvent)
		w.now = ev.at
		if w.now.After(limit) {
			w.failf("stranded: not everything settled within 5 minutes after the workload (%s)", w.pending())
			break
		}
		w.steps++
		ev.do()
		if w.ending && w.settled() {
			break
		}
	}
	if len(w.fails) == 0 {
		w.checkEnd()
	}
	return w
}

func (w *world) summary() string {
	return fmt.Sprintf("%d events, %d deliveries, %d steps, %s", len(w.events), len(w.deliveries), w.steps, w.now.Sub(w.start))
}

// simTotals sums the runs of TestSimulation.
type simTotals struct {
	runs, events, deliveries, steps, kills, cuts, stale int
	dups                                                dupCounts
}

func (s *simTotals) add(w *world) {
	s.runs++
	s.events += len(w.events)
	s.deliveries += len(w.deliveries)
	s.steps += w.steps
	s.kills += w.trace.count["kill"]
	s.cuts += w.trace.count["cut"]
	s.stale += w.stale
	s.dups.add(w.dups)
}

func (s simTotals) String() string {
	return fmt.Sprintf("%d events, %d deliveries, %d steps, %d kills, %d leaders cut off, %d stale backlog entries left by "+
		"relays cut off; %s", s.events, s.deliveries, s.steps, s.kills, s.cuts, s.stale, s.dups)
}

// --- the event queue and the trace ---

type simEvent struct {
	at   time.Time
	seq  uint64
	name string
	do   func()
}

type simQueue struct {
	evs []*simEvent
	seq uint64
}

func (q *simQueue) Len() int { return len(q.evs) }
func (q *simQueue) Less(i, j int) bool {
	if !q.evs[i].at.Equal(q.evs[j].at) {
		return q.evs[i].at.Before(q.evs[j].at)
	}
	return q.evs[i].seq < q.evs[j].seq
}
func (q *simQueue) Swap(i, j int) { q.evs[i], q.evs[j] = q.evs[j], q.evs[i] }
func (q *simQueue) Push(x any)    { q.evs = append(q.evs, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	ev := q.evs[len(q.evs)-1]
	q.evs = q.evs[:len(q.evs)-1]
	return ev
}

func (w *world) schedule(d time.Duration, name string, do func()) {
	w.q.seq++
	heap.Push(&w.q, &simEvent{at: w.now.Add(d), seq: w.q.seq, name: name, do: do})
}

// tracer keeps a run's trace: every line when full, else the last ones (formatted only when
// shown: most runs pass).
type tracer struct {
	full  bool
	lines []string
	last  []traceLine
	count map[string]int
}

type traceLine struct {
	at     time.Duration
	format string
	args   []any
}

func (l traceLine) String() string {
	return fmt.Sprintf("%10s ", l.at.Round(time.Microsecond)) + fmt.Sprintf(l.format, l.args...)
}

func (w *world) tracef(format string, args ...any) {
	t := w.trace
	if t.count == nil {
		t.count = map[string]int{}
	}
	word, _, _ := strings.Cut(format, " ")
	t.count[word]++
	l := traceLine{w.now.Sub(w.start), format, args}
	if t.full {
		t.lines = append(t.lines, l.String())
		return
	}
	if len(t.last) >= 200 {
		copy(t.last, t.last[100:])
		t.last = t.last[:100]
	}
	t.last = append(t.last, l)
}

func (t *tracer) tail(n int) string {
	if t.full {
		return strings.Join(t.lines[max(len(t.lines)-n, 0):], "\n")
	}
	var b strings.Builder
	for i, l := range t.last[max(len(t.last)-n, 0):] {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.String())
	}
	return b.String()
}

func (t *tracer) hash() uint64 {
	h := fnv.New64a()
	for _, l := range t.lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

func (w *world) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.tracef("FAIL %s", msg)
	w.fails = append(w.fails, msg)
}

// --- the producer: transactions committed into the log ---

func (w *world) newID() string {
	w.ids++
	return fmt.Sprintf("0193a5b2-7c4e-7d1a-9f00-%012d", w.ids)
}

// commit appends a transaction of events and control records (each at its index) to the log
// and the table, and wakes the leader's stream.
func (w *world) commit(events []*envelope.Message, controls []cdc.Control) *walTx {
	tx := &walTx{commit: w.nextLSN, end: w.nextLSN + 8, at: w.now, events: events, controls: controls}
	w.nextLSN += 16
	for i, m := range events {
		m.Sequence = envelope.Sequence(uint64(tx.commit), i)
		m.CommitTime, m.CreatedAt = w.now, w.now
		w.events[m.ID] = &eventInfo{m: m, tx: tx, idx: i}
	}
	w.db.Insert(events...)
	w.wal = append(w.wal, tx)
	w.noteSince(tx)
	if w.eps != nil {
		w.eps.committed(tx)
	}
	w.tracef("commit %s: %d events %s", tx.commit, len(events), describeControls(controls))
	if w.leader != nil {
		w.leader.kick()
	}
	return tx
}

func describeControls(cs []cdc.Control) string {
	var out []string
	for _, c := range cs {
		switch {
		case c.Endpoint != nil:
			out = append(out, fmt.Sprintf("@%d %s %s", c.At, c.Endpoint.Op, c.Endpoint.ID))
		case c.Replay != nil && c.Replay.SinceRequest != 0:
			out = append(out, fmt.Sprintf("@%d replay-since %d", c.At, c.Replay.SinceRequest))
		case c.Replay != nil:
			out = append(out, fmt.Sprintf("@%d replay %s %v", c.At, c.Replay.Pipeline, c.Replay.Aggregates))
		}
	}
	return strings.Join(out, " ")
}

var eventTypes = []string{"order.created", "order.paid", "invoice.sent"}

func (w *world) newEvent() *envelope.Message {
	agg := w.aggs[w.rng.IntN(len(w.aggs))]
	typ := eventTypes[w.rng.IntN(len(eventTypes))]
	m := &envelope.Message{ID: w.newID(), AggregateType: strings.Split(typ, ".")[0], AggregateID: agg, EventType: typ,
		Payload: []byte(`{}`)}
	if w.eps != nil {
		m.TenantID = tenants[int(agg[1]-'0')%len(tenants)]
	}
	return m
}

var tenants = []string{"t1", "t2", ""}

// write commits one transaction of the workload and schedules the next.
func (w *world) write() {
	if w.ending {
		return
	}
	var events []*envelope.Message
	for range 1 + w.rng.IntN(4) {
		events = append(events, w.newEvent())
	}
	var controls []cdc.Control
	if w.rng.IntN(12) == 0 {
		if c := w.control(); c != nil {
			c.At = w.rng.IntN(len(events) + 1)
			controls = append(controls, *c)
		}
	}
	w.commit(events, controls)
	w.schedule(time.Duration(w.rng.IntN(60))*time.Millisecond, "write", w.write)
}

// control makes a control record of the workload: an endpoint change, a replay of parked
// aggregates, a replay since a time.
func (w *world) control() *cdc.Control {
	switch n := w.rng.IntN(10); {
	case n < 6 && w.eps != nil:
		return w.eps.change()
	case n < 8:
		return w.replayParked()
	case w.eps == nil:
		since := w.now.Add(-time.Duration(1+w.rng.IntN(3)) * time.Second)
		id := w.db.RequestSince(store.SinceState{Pipeline: simPipeline, Since: since, Total: 1})
		return &cdc.Control{Replay: &cdc.ReplayRequest{Pipeline: simPipeline, SinceRequest: id}}
	default:
		return w.recoverEndpoint()
	}
}

// replayParked asks a lane with parked aggregates to replay them.
func (w *world) replayParked() *cdc.Control {
	lanes := []string{simPipeline}
	if w.eps != nil {
		// Not to a paused endpoint: its replayed events would wait in its lane, holding the
		// request's transaction and their room in the buffer until it resumes; replays that
		// fill the buffer would keep the stream from reading the resume (a limit the engine
		// shares with the engine before it: a replay goes through the stream's buffer).
		lanes = nil
		for _, id := range w.eps.ids() {
			if w.eps.rows[id].State == endpoint.Enabled {
				lanes = append(lanes, simPipeline+"/"+id)
			}
		}
	}
	for _, lane := range lanes {
		parked, _ := w.db.Pipeline(lane, w.eps != nil).Parked(context.Background())
		if len(parked) > 0 {
			var aggs []cdc.Aggregate
			for _, a := range parked {
				aggs = append(aggs, cdc.Aggregate(a))
			}
			return &cdc.Control{Replay: &cdc.ReplayRequest{Pipeline: lane, Aggregates: aggs}}
		}
	}
	return nil
}

// seedBackfill puts rows in the table before the slot exists: the first process delivers them
// from the backfill, before the stream.
func (w *world) seedBackfill() {
	if w.rng.IntN(3) > 0 {
		return
	}
	var ms []*envelope.Message
	var ids []string
	for range 1 + w.rng.IntN(10) {
		m := w.newEvent()
		m.CreatedAt = w.now
		ms, ids = append(ms, m), append(ids, m.ID)
		w.events[m.ID] = &eventInfo{m: m, idx: len(ms)} // tx nil: the backfill
	}
	w.db.Insert(ms...)
	w.db.Backfill("slot", ids...)
}

// --- the destinations ---

// receiver is a destination's server: how it answers now.
type receiver struct {
	mode  string // "", "fail", "hang", "gone", "slow", "429"
	until time.Time
}

var modes = []string{"fail", "hang", "slow", "429", "gone", "fail", "hang", "drop"}

// simDest is a lane's destination: it asks the receiver and records what was applied.
type simDest struct {
	w        *world
	endpoint string
	last     *attemptResult // the result of the attempt being made (the simulation makes one at a time)
}

type attemptResult struct {
	latency time.Duration
	applied bool
}

func (d *simDest) answer(ms []*envelope.Message) destination.Result {
	w := d.w
	rc := w.recv[d.endpoint]
	mode := ""
	if rc != nil && w.now.Before(rc.until) {
		mode = rc.mode
	}
	res := &attemptResult{latency: time.Duration(1+w.rng.IntN(20)) * time.Millisecond}
	d.last = res
	switch mode {
	case "fail":
		return destination.Result{Status: 500, Label: destination.Result5xx}
	case "429":
		return destination.Result{Status: 429, Label: destination.Result4xx, RetryAfter: time.Duration(50+w.rng.IntN(300)) * time.Millisecond}
	case "gone":
		return destination.Result{Status: 410, Label: destination.Result4xx, Gone: true}
	case "hang": // held until the relay gives up, never applied (as the torture's receiver)
		res.latency = simTimeout
		return destination.Result{Err: context.DeadlineExceeded, Label: destination.ResultTimeout}
	case "drop": // applied, but the answer is lost
		res.applied = true
		return destination.Result{Err: errSim, Label: destination.ResultNetwork}
	case "slow":
		res.latency = time.Duration(100+w.rng.IntN(900)) * time.Millisecond
	}
	res.applied = true
	return destination.Result{Delivered: true, Status: 200, Label: destination.ResultSuccess}
}

func (d *simDest) Send(_ context.Context, m *envelope.Message, attempt int) destination.Result {
	d.tried(m, attempt)
	return d.answer([]*envelope.Message{m})
}

func (d *simDest) SendBatch(_ context.Context, ms []*envelope.Message, attempt int) destination.Result {
	if len(ms) == 1 {
		d.tried(ms[0], attempt)
	}
	return d.answer(ms)
}

// tried notes the attempts a lone event had: a shadow pipeline gives it up after its last one.
func (d *simDest) tried(m *envelope.Message, attempt int) {
	if d.w.tries == nil {
		d.w.tries = map[string]int{}
	}
	d.w.tries[m.ID] = max(d.w.tries[m.ID], attempt)
}

// --- the relay processes ---

// proc is one relay process: an engine, its tracker, its stream session.
type proc struct {
	w         *world
	id        int
	e         *engine
	tr        *cdc.Tracker
	marks     *simMarks
	alive     bool
	streaming bool
	session   uint64
	since     time.Time     // its session began
	started   time.Time     // it started (and read the stores)
	from      pglogrepl.LSN // the slot's confirmed position as it began
	next      int           // the log index of the next transaction to send
	lastEnd   pglogrepl.LSN
	tickAt    time.Time
	tickSeq   int
	kicked    bool
	dests     map[string]*simDest
	seen      procSeen // what it knew of earlier deliveries (sim_check_test.go)
}

func (w *world) startProc() *proc {
	w.procIDs++
	p := &proc{w: w, id: w.procIDs, alive: true, tr: cdc.NewTracker(simBuffer, 1<<30), dests: map[string]*simDest{},
		seen: procSeen{log: simLog{w: w}, looked: map[pairKey][]time.Time{}}, started: w.now}
	p.marks = &simMarks{w: w, db: w.db.Marks()}
	o := w.opts
	cfg := engineConfig{pipeline: simPipeline, workers: o.workers, endpointMaxInFlight: 1 + w.rng.IntN(4),
		retryMin: 10 * time.Millisecond, retryMax: 500 * time.Millisecond, maxAttempts: o.maxAttempts, shutdownTimeout: time.Second,
		onGone: GonePause, backfillSlot: "slot", resume: &Resume{Delivered: p.marks.Delivered, History: simHistory{p}}, deliveryLog: &p.seen.log,
		confirmed: func() pglogrepl.LSN { return w.slot }, statusInterval: time.Second, spillAfter: o.spillAfter,
		spillSize: 20 + w.rng.IntN(100), disableAfter: o.disable, clock: func() time.Time { return w.now }}
	if o.endpoints {
		cfg.buffer = simBuffer // (fanoutDefaults, which the simulation does not call)
	}
	cfg.slot = p
	if w.trace.full {
		cfg.trace = func(format string, args ...any) { w.tracef("p%d "+format, append([]any{p.id}, args...)...) }
	}
	if o.maxAttempts == 0 {
		cfg.maxAttempts = -1
	}
	if o.backlog {
		cfg.backlog = simBacklog{w.db.Backlog(simPipeline), p}
	}
	cfg.store = sinceNoted{w.db.Pipeline(simPipeline, o.endpoints), w, ""}
	if o.shadow {
		cfg.shadow, cfg.store = true, abandons{cfg.store, w}
	}
	var recordPause func(context.Context, string) error
	if o.endpoints {
		cfg.endpoints = w.db.Endpoints(simPipeline)
		cfg.laneStore = func(name string) store.Pipeline {
			return sinceNoted{w.db.Pipeline(name, true), w, strings.TrimPrefix(name, simPipeline+"/")}
		}
		cfg.open = func(id string, row []byte) (destination.Destination, func(), time.Time, error) {
			if len(row) == 0 {
				w.failf("endpoint %s: its destination was built again without its row", id)
			}
			var rebuildAt time.Time // (as a rotated secret's grace end, without the rng: seeds keep their runs)
			if id[len(id)-1]%2 == 1 {
				rebuildAt = w.now.Add(2 * time.Second)
			}
			return p.dest(id), nil, rebuildAt, nil
		}
		cfg.disable = func(_ context.Context, id, reason string) error {
			if !w.eps.disable(id, reason) {
				return ErrDisabledAlready
			}
			w.disables[id]++
			return nil
		}
		cfg.notify = func(ev EndpointEvent) {
			if ev.Type == EventEndpointDisabled {
				w.notified[ev.Endpoint]++
				w.checkNotified(ev.Endpoint)
			}
		}
	} else {
		recordPause = func(context.Context, string) error { w.paused = true; return nil }
		cfg.recordPause = recordPause
	}
	rnd := rand.New(rand.NewPCG(w.rng.Uint64(), w.rng.Uint64()))
	p.e = newEngine(cfg, zerolog.Nop(), newPublisherMetrics(nil), p.tr, p.marks, w.now, rnd.Float64)
	if o.endpoints {
		p.e.tm = newTransitionMetrics(nil)
	} else {
		l := p.e.single
		l.store, l.maxInFlight = cfg.store, o.workers
		if o.batch > 1 {
			l.batching = Batch{MaxEvents: o.batch, MaxBytes: 1 << 20, Linger: time.Duration(w.rng.IntN(10)) * time.Millisecond}
		}
		l.setDest(p.dest(""))
	}
	w.procs = append(w.procs, p)
	w.tracef("start p%d", p.id)
	p.input(func(e *engine) {
		e.setPause(true, "starting: reading the pipeline's control row")
		e.start(w.now)
		e.setPause(w.paused, "")
	})
	w.lead(p)
	return p
}

func (p *proc) dest(id string) *simDest {
	if p.dests[id] == nil {
		p.dests[id] = &simDest{w: p.w, endpoint: id}
	}
	return p.dests[id]
}

// lead makes p stream from the slot: a new session from the slot's confirmed position.
func (w *world) lead(p *proc) {
	w.leader = p
	p.streaming = true
	p.session++
	p.since, p.from = w.now, w.slot
	p.next = 0
	for p.next < len(w.wal) && w.wal[p.next].end <= w.slot {
		p.next++
	}
	p.seen.sessions = append(p.seen.sessions, w.now)
	w.tracef("lead p%d session %d from %s", p.id, p.session, w.slot)
	p.kick()
}

// abandons notes the events a shadow pipeline abandoned: they are excused from delivery.
type abandons struct {
	store.Pipeline
	w *world
}

func (a abandons) Abandoned(ctx context.Context, m *envelope.Message, attempts int, lastErr string) error {
	err := a.Pipeline.Abandoned(ctx, m, attempts, lastErr)
	if err == nil {
		a.w.abandoned[m.ID] = true
	}
	return err
}

// Session and SessionFrom make p the engine's Slot.
func (p *proc) Session() uint64 {
	if p.streaming {
		return p.session
	}
	return 0
}

func (p *proc) SessionFrom() pglogrepl.LSN { return p.from }

// input hands the engine one input and carries out what it decided.
func (p *proc) input(f func(e *engine)) {
	if !p.alive {
		return
	}
	f(p.e)
	for _, eff := range p.e.drain() {
		if eff.attempt != nil {
			p.attempt(eff.attempt)
		} else {
			p.op(eff.op)
		}
	}
	p.w.checkIsolated(p)
	p.w.checkFairShare(p)
	if dl := p.e.deadline(); !dl.IsZero() && (p.tickAt.IsZero() || dl.Before(p.tickAt)) {
		p.tickAt = dl
		p.tickSeq++
		seq := p.tickSeq
		p.w.schedule(max(dl.Sub(p.w.now), 0), "tick", func() {
			if seq != p.tickSeq || !p.alive {
				return
			}
			p.tickAt = time.Time{}
			p.input(func(e *engine) { e.tick(p.w.now) })
		})
	}
}

func (p *proc) attempt(a *attempt) {
	w := p.w
	r := a.Send(context.Background())
	sent := p.sent(a)
	d := a.dest.(interface{ unwrap() *simDest })
	res := d.unwrap().last
	ids := make([]string, len(a.ms))
	for i, m := range a.ms {
		ids[i] = m.ID
	}
	w.tracef("attempt p%d %s #%d %v -> %s", p.id, a.lane.name, a.n, ids, r.Label)
	w.schedule(res.latency, "answer", func() {
		if res.applied {
			for i, m := range a.ms {
				w.delivered(p.id, a.lane.id, m.ID, sent.items[i].resent || sent.items[i].kind == kindSince)
				w.checkDup(p, a.lane.id, m.ID, sent.items[i], r.Delivered)
			}
		}
		p.answered(sent)
		if p.alive && w.opts.shadow && !r.Delivered && !r.Gone && a.n >= w.opts.maxAttempts && len(a.ms) == 1 {
			// the shadow gives the event up now (its record is best effort, and may come later)
			w.abandoned[a.ms[0].ID] = true
			if _, ok := w.gaveUp[a.ms[0].ID]; !ok {
				w.gaveUp[a.ms[0].ID] = giveUp{p.id, w.now}
			}
		}
		if p.alive {
			p.input(func(e *engine) { e.finished(a, r, w.now) })
		}
	})
}

// op runs a store operation as the driver would: a durable one until it succeeds (here some
// tries fail), then its result comes back to the engine a moment later; a kill in between
// leaves it done or not done, as a crash would.
func (p *proc) op(o *op) {
	w := p.w
	var exec func()
	exec = func() {
		if !p.alive {
			return
		}
		if w.rng.IntN(20) == 0 && !w.ending { // the database refuses it this time
			if o.durable {
				w.schedule(time.Duration(10+w.rng.IntN(200))*time.Millisecond, "retry op", exec)
				return
			}
			p.seen.refused(o, w.now)
			w.schedule(time.Millisecond, "op failed", func() { p.input(func(e *engine) { e.opDone(o, nil, errSim, false, w.now) }) })
			return
		}
		v, err := o.run(context.Background())
		if err != nil && o.durable {
			w.tracef("op p%d %s: %v (retried)", p.id, o.what, err)
			w.schedule(time.Duration(10+w.rng.IntN(100))*time.Millisecond, "retry op", exec)
			return
		}
		if !o.durable && strings.HasPrefix(o.what, "save") {
			// the periodic status: not traced
		} else {
			w.tracef("op p%d %s", p.id, o.what)
		}
		w.schedule(time.Duration(w.rng.IntN(20))*time.Millisecond, "op done", func() {
			p.input(func(e *engine) { e.opDone(o, v, err, false, w.now) })
		})
	}
	w.schedule(time.Duration(w.rng.IntN(30))*time.Millisecond, "op", exec)
}

var errSim = errors.New("simulated: the database refused the statement")

// kick schedules the stream's next step.
func (p *proc) kick() {
	if p.kicked || !p.streaming || !p.alive {
		return
	}
	p.kicked = true
	p.w.schedule(time.Duration(p.w.rng.IntN(3))*time.Millisecond, "stream", p.stream)
}

// stream sends the next transaction of the log, as the stream does once it is committed, while
// the tracker's buffer has room.
func (p *proc) stream() {
	p.kicked = false
	w := p.w
	if !p.alive || !p.streaming {
		return
	}
	for p.next < len(w.wal) && w.wal[p.next].end <= p.lastEnd {
		p.next++
	}
	if p.next == len(w.wal) {
		return
	}
	if p.tr.Full() {
		p.kicked = true
		w.schedule(5*time.Millisecond, "stream", p.stream)
		return
	}
	wt := w.wal[p.next]
	p.next++
	p.lastEnd = wt.end
	tx := &cdc.Tx{CommitLSN: wt.commit, EndLSN: wt.end, CommitTime: wt.at, Session: p.session, Resent: wt.at.Before(p.since)}
	for _, m := range wt.events {
		c := *m
		tx.Events = append(tx.Events, &c)
	}
	for _, c := range wt.controls {
		c2 := c
		if c.Endpoint != nil {
			ch := *c.Endpoint
			c2.Endpoint = &ch
		}
		if c.Replay != nil {
			r := *c.Replay
			c2.Replay = &r
		}
		tx.Controls = append(tx.Controls, c2)
	}
	p.tr.Add(tx)
	w.tracef("stream p%d %s", p.id, wt.commit)
	p.input(func(e *engine) { e.offer(tx, w.now) })
	p.kick()
}

// simMarks are the status marks as the Marker writes them: queued, written a moment later, and
// lost if the process dies first.
type simMarks struct {
	w       *world
	db      store.Marks
	pending []func()
	armed   bool
	dead    bool
}

func (m *simMarks) Done(id, seq string, retries int) {
	if m.dead {
		return
	}
	m.pending = append(m.pending, func() { m.db.Done(id, seq, retries) })
	if m.w.trace.full {
		m.w.tracef("mark %s", id)
	}
	if !m.armed {
		m.armed = true
		m.w.schedule(time.Duration(m.w.rng.IntN(100))*time.Millisecond, "marks", func() {
			m.armed = false
			if m.dead {
				return
			}
			for _, f := range m.pending {
				f()
			}
			m.pending = nil
		})
	}
}

func (m *simMarks) Flushed() bool { return len(m.pending) == 0 }

func (m *simMarks) Delivered(ctx context.Context, ids []string) (map[string]bool, error) {
	return m.db.Delivered(ctx, ids)
}

// --- faults ---

// fault strikes: the leader killed or cut off from the slot (a standby takes over), a destination
// misbehaving for a while, the pipeline paused.
func (w *world) fault() {
	if w.ending {
		return
	}
	switch n := w.rng.IntN(10); {
	case n < 2:
		w.kill(w.leader)
	case n < 3:
		w.cut(w.leader)
	case n < 7:
		ids := []string{""}
		if w.eps != nil {
			ids = w.eps.ids()
		}
		if len(ids) > 0 {
			id := ids[w.rng.IntN(len(ids))]
			rc := w.recv[id]
			if rc == nil {
				rc = &receiver{}
				w.recv[id] = rc
			}
			rc.mode, rc.until = modes[w.rng.IntN(len(modes))], w.now.Add(time.Duration(200+w.rng.IntN(4000))*time.Millisecond)
			if rc.mode == "gone" && w.eps == nil && w.rng.IntN(2) == 0 {
				rc.mode = "fail"
			}
			w.tracef("receiver %q %s until %s", id, rc.mode, rc.until.Sub(w.start))
		}
	case n < 8:
		w.setPaused(!w.paused)
	default:
		if w.eps != nil {
			w.eps.operate()
		}
	}
	w.schedule(time.Duration(w.rng.Float64()/w.opts.faults*float64(time.Second)), "fault", w.fault)
}

// kill ends p at once: what it had not written is lost, the attempts it started may still land.
func (w *world) kill(p *proc) {
	if p == nil || !p.alive {
		return
	}
	p.alive, p.streaming = false, false
	p.marks.dead = true
	p.seen.log.dead = true
	w.losses = append(w.losses, w.now)
	w.tracef("kill p%d", p.id)
	w.checkParkedPrefix()
	if w.leader == p {
		w.leader = nil
		w.schedule(time.Duration(w.rng.IntN(500))*time.Millisecond, "takeover", w.takeover)
	}
}

// cut cuts p off from the slot: it goes on delivering what it holds, and another process
// takes the slot over.
func (w *world) cut(p *proc) {
	if p == nil || !p.alive || !p.streaming {
		return
	}
	p.streaming = false
	w.losses = append(w.losses, w.now)
	w.tracef("cut p%d", p.id)
	w.leader = nil
	w.schedule(time.Duration(w.rng.IntN(300))*time.Millisecond, "takeover", w.takeover)
	w.schedule(time.Duration(500+w.rng.IntN(3000))*time.Millisecond, "zombie end", func() {
		if p.alive && !p.streaming {
			if w.leader == nil && w.rng.IntN(2) == 0 {
				w.lead(p)
				return
			}
			w.kill(p)
		}
	})
}

// takeover gives the slot to a standby (a new process), unless someone leads.
func (w *world) takeover() {
	if w.leader != nil {
		return
	}
	alive := 0
	for _, p := range w.procs {
		if p.alive {
			alive++
		}
	}
	if alive >= 2 {
		w.schedule(100*time.Millisecond, "takeover", w.takeover)
		return
	}
	w.startProc()
}

func (w *world) setPaused(paused bool) {
	w.paused = paused
	w.tracef("paused %v", paused)
	for _, p := range w.procs {
		p.input(func(e *engine) { e.pause(paused, "paused by the operator", w.now) })
	}
}

// end stops the workload: the destinations recover, the pipeline resumes, disabled endpoints
// are enabled and parked aggregates replayed; everything must then settle.
func (w *world) end() {
	w.ending = true
	w.tracef("end of the workload")
	for _, rc := range w.recv {
		rc.until = time.Time{}
	}
	for _, p := range w.procs {
		if p != w.leader {
			w.kill(p)
		}
	}
	if w.leader == nil {
		w.schedule(0, "takeover", w.takeover)
	}
	w.setPaused(false)
	w.schedule(0, "recover", w.recoverAll)
}

// recoverAll enables the endpoints disabled and resumes the pipeline (a 410 answered before the
// end may disable or pause after it) and asks every lane with parked aggregates to replay them, every 2s.
func (w *world) recoverAll() {
	if w.eps != nil {
		w.eps.enableAll()
	}
	if w.paused { // a 410 answered to an attempt made before the end paused the pipeline
		w.setPaused(false)
	}
	if c := w.replayParked(); c != nil {
		w.commit(nil, []cdc.Control{*c})
	}
	w.schedule(2*time.Second, "recover", w.recoverAll)
}

// --- endpoints ---

// epModel is the endpoints table: each endpoint's row as last changed.
type epModel struct {
	w       *world
	rows    map[string]*endpoint.Row
	n       int
	history []epChange // every change, in commit order
}

type epChange struct {
	commit pglogrepl.LSN
	when   time.Time // its transaction's commit time
	id     string
	row    *endpoint.Row // nil: removed
}

func newEpModel(w *world) *epModel {
	m := &epModel{w: w, rows: map[string]*endpoint.Row{}}
	for range 2 + w.rng.IntN(4) {
		m.add(true)
	}
	return m
}

func (m *epModel) ids() []string {
	ids := make([]string, 0, len(m.rows))
	for id := range m.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// add creates an endpoint: at once in the table (before the first process, which bootstraps
// it), or by a change in the log.
func (m *epModel) add(boot bool) *cdc.Control {
	m.n++
	r := m.w.rng
	row := &endpoint.Row{ID: fmt.Sprintf("ep%d", m.n), URL: "https://example.com/", State: endpoint.Enabled,
		TenantID: tenants[r.IntN(len(tenants))], EventTypes: []string{"*"}}
	m.subscribe(row)
	if r.IntN(3) == 0 {
		row.MaxInFlight = 1 + r.IntN(3)
	}
	if r.IntN(4) == 0 {
		row.BatchMaxEvents, row.BatchMaxBytes, row.BatchLingerMS = 2+r.IntN(4), 1<<20, r.IntN(5)
	}
	if r.IntN(5) == 0 {
		row.RateLimit = 20 + r.IntN(80)
	}
	if r.IntN(3) == 0 {
		row.SpillAfterMS = 200 + r.IntN(800)
	}
	if boot {
		m.rows[row.ID] = row
		m.w.db.PutEndpoint(row.ID, m.json(row))
		m.history = append(m.history, epChange{id: row.ID, row: clone(row)})
		return nil
	}
	return m.upsert(row)
}

func (m *epModel) subscribe(row *endpoint.Row) {
	r := m.w.rng
	switch r.IntN(4) {
	case 0:
		row.EventTypes = []string{"order.*"}
	case 1:
		row.EventTypes = []string{"order.created", "invoice.sent"}
	default:
		row.EventTypes = []string{"*"}
	}
	row.AggregateTypes = nil
	if r.IntN(4) == 0 {
		row.AggregateTypes = []string{"order"}
	}
}

func clone(r *endpoint.Row) *endpoint.Row {
	c := *r
	c.EventTypes = slices.Clone(r.EventTypes)
	c.AggregateTypes = slices.Clone(r.AggregateTypes)
	return &c
}

func (m *epModel) json(r *endpoint.Row) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

func (m *epModel) upsert(row *endpoint.Row) *cdc.Control {
	return &cdc.Control{Endpoint: &cdc.EndpointChange{Op: cdc.EndpointUpsert, ID: row.ID, Row: m.json(row)}}
}

// change makes a change of the workload: add, update, pause, resume, disable, enable or remove.
func (m *epModel) change() *cdc.Control {
	ids := m.ids()
	r := m.w.rng
	if len(ids) < 3 || r.IntN(6) == 0 {
		return m.add(false)
	}
	row := clone(m.rows[ids[r.IntN(len(ids))]])
	switch r.IntN(7) {
	case 0:
		m.subscribe(row)
	case 1:
		row.State = endpoint.Paused
	case 2, 3:
		row.State = endpoint.Enabled
	case 4:
		row.State = endpoint.Disabled
	case 5:
		return &cdc.Control{Endpoint: &cdc.EndpointChange{Op: cdc.EndpointDelete, ID: row.ID}}
	default:
		row.MaxInFlight = r.IntN(3)
	}
	return m.upsert(row)
}

// committed applies the endpoint changes of tx to the table, in order.
func (m *epModel) committed(tx *walTx) {
	for _, c := range tx.controls {
		ch := c.Endpoint
		if ch == nil {
			continue
		}
		if ch.Op == cdc.EndpointDelete {
			delete(m.rows, ch.ID)
			m.w.db.DeleteEndpoint(ch.ID)
			m.history = append(m.history, epChange{commit: tx.commit, when: tx.at, id: ch.ID})
			continue
		}
		var row endpoint.Row
		if err := json.Unmarshal(ch.Row, &row); err != nil {
			panic(err)
		}
		m.rows[ch.ID] = &row
		m.w.db.PutEndpoint(ch.ID, ch.Row)
		m.history = append(m.history, epChange{commit: tx.commit, when: tx.at, id: ch.ID, row: clone(&row)})
	}
}

// disable disables endpoint id, as endpoints.Store.DisableOnce does (the relay's auto-disable
// and its answer to a 410): a change in the log, unless it is gone or disabled already; it
// reports whether it changed the row.
func (m *epModel) disable(id, reason string) bool {
	row := m.rows[id]
	if row == nil || row.State == endpoint.Disabled {
		return false
	}
	row = clone(row)
	row.State, row.DisabledReason = endpoint.Disabled, reason
	m.w.commit(nil, []cdc.Control{*m.upsert(row)})
	return true
}

// operate is the operator: enable a disabled endpoint, resume a paused one.
func (m *epModel) operate() {
	for _, id := range m.ids() {
		if row := m.rows[id]; row.State != endpoint.Enabled && m.w.rng.IntN(2) == 0 {
			row = clone(row)
			row.State, row.DisabledReason = endpoint.Enabled, ""
			m.w.commit(nil, []cdc.Control{*m.upsert(row)})
			return
		}
	}
}

// enableAll enables and resumes every endpoint, at the end of the workload.
func (m *epModel) enableAll() {
	var cs []cdc.Control
	for _, id := range m.ids() {
		if row := m.rows[id]; row.State != endpoint.Enabled {
			row = clone(row)
			row.State, row.DisabledReason = endpoint.Enabled, ""
			cs = append(cs, *m.upsert(row))
		}
	}
	if len(cs) > 0 {
		m.w.commit(nil, cs)
	}
}

// unwrap returns the simulated destination inside a lane's decorated one.
func (o *observed) unwrap() *simDest { return o.inner.(*simDest) }

// simBacklog notes which process wrote to an endpoint's backlog when (checkGauges).
type simBacklog struct {
	store.Backlog
	p *proc
}

func (b simBacklog) Spill(ctx context.Context, endpoint string, es []store.BacklogEntry) error {
	err := b.Backlog.Spill(ctx, endpoint, es)
	if err == nil {
		b.wrote(endpoint)
	}
	return err
}

// SpillReplay passes a replay --since's rows on to the in-memory backlog (store.ReplayBacklog).
func (b simBacklog) SpillReplay(ctx context.Context, endpoint string, es []store.BacklogEntry, st store.SinceState) error {
	err := b.Backlog.(store.ReplayBacklog).SpillReplay(ctx, endpoint, es, st)
	if err == nil {
		b.wrote(endpoint)
	}
	return err
}

func (b simBacklog) wrote(endpoint string) {
	w := b.p.w
	if w.spilled[endpoint] == nil {
		w.spilled[endpoint] = map[int]time.Time{}
	}
	w.spilled[endpoint][b.p.id] = w.now
}
