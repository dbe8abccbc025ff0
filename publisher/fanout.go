package publisher

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/store"
)

// Fanout delivers a pipeline's events to the partner endpoints of outbox_endpoints instead of
// one destination. One slot, one stream and one tracker serve every endpoint:
//
//   - Routing. Each event goes to every endpoint that is not disabled and whose subscription
//     matches it (tenant, event-type patterns, aggregate types), as the endpoints stood when the
//     event's transaction committed: changes of outbox_endpoints reach the stream as
//     transactional logical messages (the table's trigger), each applied at its place in
//     commit order and recorded in the versions log (EndpointStore), from which a relay that
//     starts or takes over knows the endpoints as of every transaction it is sent again.
//   - Lanes. Each endpoint is a Publisher of its own, named "<pipeline>/<endpoint id>": keyed
//     queues per aggregate, retries with backoff and Retry-After, dead letters that park the
//     aggregate for that endpoint alone, replays, pause, in-flight cap and rate limit, its own
//     destination (its URL, secrets, scheme and format). The lanes share one pool of workers,
//     so goroutines do not grow with endpoints, and a lane that waits (retry timers, its rate
//     limit, its cap, a pause) holds no worker.
//   - Confirmation. Each (event, endpoint) delivery settles against the event's transaction in
//     the tracker, so the slot confirms a transaction once every endpoint its events route to
//     has delivered them or recorded them durably (parked, dead-lettered, abandoned). A paused or
//     failing endpoint therefore holds the slot (until a backlog off the WAL exists).
//   - Marks. An event is marked done once every endpoint it routes to delivered it; one that
//     routes to none is marked at once.
//
// Run it once, like a Publisher.
type Fanout struct {
	cfg   FanoutConfig
	acker Acker
	marks Marks
	log   zerolog.Logger
	m     *publisherMetrics
	pool  *workerPool

	mu      sync.RWMutex // guards lanes (written by Run's goroutine only) for the readers
	lanes   map[string]*lane
	route   router
	pending []store.EndpointVersion // versions loaded at start, not applied yet, in LSN order
	// parked are the endpoints' parked aggregates read at start, for the lanes that start
	// then; nil afterwards (a lane started later reads its own).
	parked map[string][]cdc.Aggregate
	// doomed are the endpoints that a pending version disables or removes (findDoomed).
	doomed map[string]bool
	// backlogs are the endpoints' backlogs read at start, for their lanes: each lane takes its
	// own when it is created (at start, or later by a version still pending then).
	backlogs map[string]store.BacklogSize

	fanMu sync.Mutex
	fan   map[*envelope.Message]*fanCount // events routed to more than one endpoint

	backfillLeft countdown
	pause        pauseState
	session      uint64       // the streaming session of the last transaction queued
	health       fanoutHealth // fanout_health.go
}

// FanoutConfig configures a Fanout. The delivery settings are the pipeline's, applied to every
// endpoint; an endpoint's row sets its own URL, secrets, scheme, format, rate limit and
// in-flight cap.
type FanoutConfig struct {
	// Pipeline is the pipeline's name (a shard's, when sharded); endpoint E's lane is named
	// Pipeline + "/" + E in its log lines, dead letters, parked aggregates and replay requests.
	// Required.
	Pipeline string
	// Workers is the number of delivery workers all endpoints share. Zero: 256
	// (settings.EndpointWorkers).
	Workers int
	// EndpointMaxInFlight is an endpoint's in-flight cap when its row sets none. Zero: 16
	// (settings.EndpointMaxInFlight).
	EndpointMaxInFlight int
	// RetryMin, RetryMax, MaxAttempts, ShutdownTimeout and LogPayloads mean what they mean in
	// Config, per endpoint.
	RetryMin, RetryMax time.Duration
	MaxAttempts        int
	ShutdownTimeout    time.Duration
	LogPayloads        bool
	Logger             zerolog.Logger
	// Registerer receives the aggregate series (those of a Publisher, summed over endpoints)
	// and the endpoint series (docs/reference/metrics.md). Nil: registered nowhere.
	Registerer prometheus.Registerer
	// Store is the pipeline's store, for its backfill (BackfillSlot).
	Store        store.Pipeline
	BackfillSlot string
	// Resume, if set, skips events an earlier process delivered to every endpoint.
	Resume *Resume
	// DeliveryLog, if set, records every attempt of every endpoint (DeliveryLogWriter keeps it
	// in PostgreSQL). Nil: nothing is recorded.
	DeliveryLog store.DeliveryLog
	// Endpoints keeps the versions log and the endpoints' status. Required.
	Endpoints store.Endpoints
	// LaneStore returns the Store of the lane named name (its dead letters, parked aggregates
	// and replays). Required.
	LaneStore func(name string) store.Pipeline
	// Open builds an endpoint's destination from its row (the JSON of to_jsonb), and returns
	// what releases it and when it must be built again (a secret expires; zero: never). An
	// error makes every attempt of the endpoint fail with it, so that it shows in its status and
	// its events retry until it is fixed. Required.
	Open func(id string, row []byte) (dest Destination, release func(), rebuildAt time.Time, err error)
	// Disable disables endpoint id with reason (a 410 Gone): its row changes, and the change
	// reaches every relay through the stream. Required.
	Disable func(ctx context.Context, id, reason string) error
	// Confirmed returns the position the slot confirmed, to prune the versions log. Nil: never
	// pruned.
	Confirmed func() pglogrepl.LSN
	// MetricsEndpoints are endpoints whose series are always exported; MetricsMax bounds the
	// others to the most troubled ones. Zero MetricsMax: 20 (settings.EndpointMetricsMax); a
	// negative one exports none beyond MetricsEndpoints.
	MetricsEndpoints []string
	MetricsMax       int
	// StatusInterval is how often the endpoints' status is saved. Zero: 5s.
	StatusInterval time.Duration
	// Backlog keeps the endpoints' backlogs off the WAL (fanout_spill.go). Nil: an endpoint
	// never spills, and holds the slot while it holds events.
	Backlog store.Backlog
	// SpillAfter is how long an endpoint's oldest undelivered event waits before the endpoint
	// spills to its backlog, unless its row sets spill_after_ms. Zero: 30s
	// (settings.EndpointSpillAfter).
	SpillAfter time.Duration
	// SpillSize is how many events an endpoint holds, delivering none for a second, before it
	// spills. Zero: 1000 (settings.EndpointSpillSize).
	SpillSize int
	// DisableAfter is how long an endpoint fails without a success before it is disabled
	// automatically (fanout_health.go). Zero: 120h, five days (settings.EndpointDisableAfter);
	// negative: never.
	DisableAfter time.Duration
	// Notify, if set, receives the endpoints' operational events (disabled, recovered); it must
	// not block.
	Notify func(EndpointEvent)
}

// EndpointStore keeps what a Fanout records about its endpoints; PGEndpointStore implements
// it on the relay's tables.
type EndpointStore interface {
	// Versions returns the versions log in LSN order, whether it was bootstrapped and the LSN
	// of that bootstrap (the versions there are the endpoints the log begins with).
	Versions(ctx context.Context) (marker pglogrepl.LSN, bootstrapped bool, vs []store.EndpointVersion, err error)
	// Bootstrap records every endpoint as it is now, at LSN 0, unless the log was bootstrapped.
	Bootstrap(ctx context.Context) error
	// Record adds a version (nil row: removed); a version recorded already is kept as it is.
	Record(ctx context.Context, v store.EndpointVersion) error
	// Prune forgets the versions no transaction after confirmed needs.
	Prune(ctx context.Context, confirmed pglogrepl.LSN) error
	// Parked returns every endpoint's parked aggregates, by endpoint id (read once at start).
	Parked(ctx context.Context) (map[string][]cdc.Aggregate, error)
	// SaveStatus stores the status of endpoints; ForgetStatus drops a removed one's.
	SaveStatus(ctx context.Context, st []store.EndpointStatus) error
	ForgetStatus(ctx context.Context, id string) error
	// FailingSince returns when each failing endpoint's failures began, as its saved status
	// says (read once at start: auto-disable counts across restarts).
	FailingSince(ctx context.Context) (map[string]time.Time, error)
}

// store.EndpointVersion is an endpoint's row as a change committed at LSN left it; a nil Row is a
// removal.
type EndpointVersion struct {
	ID  string
	LSN pglogrepl.LSN
	Row []byte
}

// store.EndpointStatus is what `outbox-relay status --endpoints` shows of an endpoint in a pipeline.
// A zero time is unknown.
type EndpointStatus struct {
	ID                string
	Undelivered       int64
	OldestUndelivered time.Time
	LastSuccess       time.Time
	LastError         string
	LastErrorAt       time.Time
	FailuresInRow     int
	// FailingSince is when its current run of failed attempts began; zero: not failing.
	FailingSince time.Time
	// Backlog is how many events the endpoint's backlog off the WAL holds (not saved: `status
	// --endpoints` counts the table).
	Backlog int64
}

// fanCount counts the deliveries of an event routed to several endpoints.
type fanCount struct {
	routes, settled, delivered int
	retries                    int
}

// NewFanout returns a Fanout that acknowledges to acker and marks to marks (nil: no marks).
func NewFanout(cfg FanoutConfig, acker Acker, marks Marks) *Fanout {
	if cfg.Workers <= 0 {
		cfg.Workers = settings.EndpointWorkers
	}
	if cfg.EndpointMaxInFlight <= 0 {
		cfg.EndpointMaxInFlight = settings.EndpointMaxInFlight
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 5 * time.Second
	}
	if cfg.SpillAfter <= 0 {
		cfg.SpillAfter = settings.EndpointSpillAfter
	}
	if cfg.SpillSize <= 0 {
		cfg.SpillSize = settings.EndpointSpillSize
	}
	if cfg.MetricsMax == 0 {
		cfg.MetricsMax = settings.EndpointMetricsMax
	}
	pc := Config{RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax, MaxAttempts: cfg.MaxAttempts, ShutdownTimeout: cfg.ShutdownTimeout}
	pc.defaults()
	cfg.RetryMin, cfg.RetryMax, cfg.MaxAttempts, cfg.ShutdownTimeout = pc.RetryMin, pc.RetryMax, pc.MaxAttempts, pc.ShutdownTimeout
	f := &Fanout{cfg: cfg, acker: acker, marks: marks, log: cfg.Logger, m: newPublisherMetrics(cfg.Registerer),
		pool: newWorkerPool(), lanes: map[string]*lane{}, fan: map[*envelope.Message]*fanCount{}}
	newEndpointMetrics(f, cfg.Registerer)
	f.health.init(&f.cfg)
	return f
}

// Run takes transactions from in and delivers their events to the endpoints until ctx is done;
// then it starts nothing new, lets attempts under way finish for up to ShutdownTimeout and
// returns. Nothing it started outlives it.
func (f *Fanout) Run(ctx context.Context, in <-chan *cdc.Tx) {
	wait := f.pool.run(f.cfg.Workers, func(d time.Duration) {
		f.log.Warn().Dur("shutdown_timeout", d).Msg("cancelling deliveries still in flight")
	})
	var bg sync.WaitGroup
	defer func() {
		f.pool.close()
		f.mu.RLock()
		for _, l := range f.lanes {
			if l.pub != nil {
				l.pub.sched.close()
			}
		}
		f.mu.RUnlock()
		wait(f.cfg.ShutdownTimeout)
		bg.Wait()
		f.mu.RLock()
		for _, l := range f.lanes {
			l.release()
		}
		f.mu.RUnlock()
	}()
	if !f.load(ctx) {
		return
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		f.housekeep(ctx)
	}()
	if f.cfg.Backlog != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			f.backlogLoop(ctx)
		}()
	}
	if err := f.backfill(ctx); err != nil {
		f.log.Error().Err(err).Msg("backfill stopped; it resumes at the next start")
	}
	for {
		select {
		case <-ctx.Done():
			return
		case tx := <-in:
			f.take(ctx, tx, in)
		}
	}
}

// load reads the versions log (bootstrapping it from the table when the pipeline has none) and
// applies the versions of LSN 0, the endpoints as they were when the log began.
func (f *Fanout) load(ctx context.Context) bool {
	var boot bool
	var marker pglogrepl.LSN
	var vs []store.EndpointVersion
	read := func() bool {
		return f.durably(ctx, "read the endpoint versions", func(ctx context.Context) (err error) {
			marker, boot, vs, err = f.cfg.Endpoints.Versions(ctx)
			return err
		})
	}
	if !read() {
		return false
	}
	if !boot {
		if !f.durably(ctx, "record the endpoints", f.cfg.Endpoints.Bootstrap) || !read() {
			return false
		}
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].LSN < vs[j].LSN })
	if !f.durably(ctx, "read the endpoints' parked aggregates", func(ctx context.Context) (err error) {
		parked, err := f.cfg.Endpoints.Parked(ctx)
		f.parked = map[string][]cdc.Aggregate{}
		for id, aggs := range parked {
			for _, a := range aggs {
				f.parked[id] = append(f.parked[id], cdc.Aggregate(a))
			}
		}
		return err
	}) {
		return false
	}
	if f.cfg.Backlog != nil && !f.durably(ctx, "read the endpoints' backlogs", func(ctx context.Context) (err error) {
		f.backlogs, err = f.cfg.Backlog.Sizes(ctx)
		return err
	}) {
		return false
	}
	f.pending = vs
	f.findDoomed()
	f.applyPending(ctx, marker+1) // the endpoints the log began with; each later change applies at its commit
	f.boundBacklogs()             // the lanes exist now
	if !f.loadHealth(ctx) {
		return false
	}
	f.parked = nil
	later := map[string]bool{} // endpoints a pending version creates: their lanes take their backlogs then
	for _, v := range f.pending {
		if v.Row != nil {
			later[v.ID] = true
		}
	}
	for id, b := range f.backlogs { // an endpoint removed with a backlog left (a removal not applied here)
		if f.lanes[id] == nil && !later[id] {
			f.log.Warn().Str("endpoint", id).Int64("events", b.Entries).Msg("a backlog of an endpoint that no longer exists; dropped")
			_ = f.durably(ctx, "drop a removed endpoint's backlog", func(ctx context.Context) error { return f.cfg.Backlog.Drop(ctx, id) })
			delete(f.backlogs, id)
		}
	}
	f.mu.RLock()
	n := len(f.lanes)
	f.mu.RUnlock()
	f.log.Info().Int("endpoints", n).Int("versions", len(vs)).Msg("endpoints loaded")
	return true
}

// applyPending applies the loaded versions committed before lsn.
func (f *Fanout) applyPending(ctx context.Context, lsn pglogrepl.LSN) {
	n := 0
	for n < len(f.pending) && f.pending[n].LSN < lsn {
		f.apply(ctx, f.pending[n])
		n++
	}
	if n > 0 {
		f.pending = f.pending[n:]
		f.findDoomed()
	}
}

// findDoomed notes the endpoints that the versions still pending disable or remove. A relay
// that led the slot before this one applied those versions already, and settled without sending
// what it held for the endpoint then, while it went on delivering the endpoint's later events.
// An event resent from before such a disable is therefore not routed to that endpoint again:
// delivering it now would put it after later events of its aggregate that the endpoint got
// already (and the event was one its disable may drop in any case). It also bounds what each
// lane reads of its backlog by its versions still pending (boundBacklogs).
func (f *Fanout) findDoomed() {
	clear(f.doomed)
	for _, v := range f.pending {
		if v.Row == nil || rowDisabled(v.Row) {
			if f.doomed == nil {
				f.doomed = map[string]bool{}
			}
			f.doomed[v.ID] = true
		}
	}
	f.boundBacklogs()
}

// rowDisabled reports whether an endpoint row (to_jsonb) is in state disabled.
func rowDisabled(row []byte) bool {
	var r struct {
		State string `json:"state"`
	}
	return json.Unmarshal(row, &r) == nil && r.State == endpoint.Disabled
}

// resync makes the endpoints what the versions log says they were just before lsn, the commit
// of a new streaming session's first transaction. Another process may have led the slot
// meanwhile (this one stood by, or lost its connection) and recorded changes this one never
// applied, which the stream does not send again when they are before the slot's position; the
// changes after lsn wait in pending for their commit, as at start. An endpoint whose version is
// the one applied already is left as it is (its queued events with it).
func (f *Fanout) resync(ctx context.Context, lsn pglogrepl.LSN) bool {
	var vs []store.EndpointVersion
	if !f.durably(ctx, "read the endpoint versions", func(ctx context.Context) (err error) {
		_, _, vs, err = f.cfg.Endpoints.Versions(ctx)
		return err
	}) {
		return false
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].LSN < vs[j].LSN })
	latest := map[string]store.EndpointVersion{}
	n := 0
	for ; n < len(vs) && vs[n].LSN < lsn; n++ {
		latest[vs[n].ID] = vs[n]
	}
	f.pending = vs[n:]
	f.findDoomed()
	var gone []store.EndpointVersion
	for id, l := range f.lanes { // Run's goroutine writes lanes: no lock to read
		if _, ok := latest[id]; !ok {
			gone = append(gone, store.EndpointVersion{ID: id, LSN: l.applied}) // removed (and pruned) meanwhile
		}
	}
	var changed []store.EndpointVersion
	for id, v := range latest {
		l := f.lanes[id]
		if l == nil && v.Row == nil || l != nil && l.applied == v.LSN {
			continue
		}
		changed = append(changed, v)
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].LSN < changed[j].LSN })
	for _, v := range append(gone, changed...) {
		f.apply(ctx, v)
	}
	if len(gone)+len(changed) > 0 {
		f.log.Info().Int("endpoints_changed", len(gone)+len(changed)).Str("lsn", lsn.String()).
			Msg("endpoints brought up to date from the versions log (another relay led the slot meanwhile)")
	}
	f.boundBacklogs() // and the lanes it created
	return f.resyncBacklogs(ctx)
}

// take queues a transaction, after a restart first dropping the events an earlier process
// delivered to every endpoint (see Resume).
func (f *Fanout) take(ctx context.Context, tx *cdc.Tx, in <-chan *cdc.Tx) {
	f.cfg.Resume.take(ctx, tx, in, f.queue)
}

// queue routes a transaction's events to the endpoints and carries out its control records at
// their places among them: endpoint changes apply there, replays go to their endpoint.
func (f *Fanout) queue(ctx context.Context, tx *cdc.Tx, delivered map[string]bool) {
	if !tx.Backfill {
		if tx.Session != f.session {
			if !f.resync(ctx, tx.CommitLSN) {
				return // stopping: the transaction stays unconfirmed
			}
			f.session = tx.Session
		}
		f.applyPending(ctx, tx.CommitLSN)
	}
	next := 0
	var lanes []*lane
	for i, m := range tx.Events {
		for ; next < len(tx.Controls) && tx.Controls[next].At <= i; next++ {
			f.control(ctx, tx, &tx.Controls[next])
		}
		if delivered[m.ID] {
			f.m.EventsSkipped.Inc()
			f.acker.Ack(tx, m)
			continue
		}
		lanes = f.routeTo(lanes[:0], m)
		f.send(ctx, tx, m, lanes)
	}
	for ; next < len(tx.Controls); next++ {
		f.control(ctx, tx, &tx.Controls[next])
	}
}

// send hands m to each of lanes, which it routes to.
func (f *Fanout) send(ctx context.Context, tx *cdc.Tx, m *envelope.Message, lanes []*lane) {
	switch len(lanes) {
	case 0:
		if f.marks != nil {
			f.marks.Done(m.ID, m.Sequence, 0) // nobody is subscribed: settled as it is
		}
		if tx.Backfill {
			return
		}
		f.acker.Ack(tx, m)
		return
	case 1:
	default:
		f.fanMu.Lock()
		f.fan[m] = &fanCount{routes: len(lanes)}
		f.fanMu.Unlock()
		if !tx.Backfill {
			extra := make([]*envelope.Message, len(lanes)-1)
			for i := range extra {
				extra[i] = m
			}
			f.acker.Grow(tx, extra)
		}
	}
	for _, l := range lanes {
		l.add(ctx, tx, m)
	}
}

// routeTo appends to dst the lanes m goes to.
func (f *Fanout) routeTo(dst []*lane, m *envelope.Message) []*lane {
	f.route.build(f)
	dst = f.route.match(dst, f.route.any, m)
	if m.TenantID != "" {
		dst = f.route.match(dst, f.route.byTenant[m.TenantID], m)
	}
	if len(f.doomed) > 0 {
		dst = slices.DeleteFunc(dst, func(l *lane) bool { return f.doomed[l.id] })
	}
	return dst
}

// control carries out a control record of tx at its place in the stream.
func (f *Fanout) control(ctx context.Context, tx *cdc.Tx, c *cdc.Control) {
	switch {
	case c.Endpoint != nil:
		f.change(ctx, tx, c.Endpoint)
	case c.Replay != nil:
		name := c.Replay.Pipeline
		id, ok := strings.CutPrefix(name, f.cfg.Pipeline+"/")
		f.mu.RLock()
		l := f.lanes[id]
		f.mu.RUnlock()
		switch {
		case !ok && name == f.cfg.Pipeline:
			f.log.Warn().Msg("replay request names the pipeline, which delivers to endpoints: a replay names one " +
				"endpoint's lane, <pipeline>/<endpoint id>; ignored")
		case !ok:
			// another pipeline's request: every slot carries every message
		case l == nil || l.pub == nil:
			f.log.Warn().Str("endpoint", id).Msg("replay request for an endpoint that does not exist or is disabled; ignored " +
				"(enable it first: outbox-relay endpoint enable)")
		default:
			l.pub.control(ctx, tx, c)
			return
		}
		f.acker.AckControl(tx)
	default:
		f.acker.AckControl(tx)
	}
}

// change applies an endpoint change met in the stream at tx's commit, once it is recorded in
// the versions log; if the relay stops before it is, the change stays unconfirmed.
func (f *Fanout) change(ctx context.Context, tx *cdc.Tx, ch *cdc.EndpointChange) {
	var vs []store.EndpointVersion
	switch ch.Op {
	case cdc.EndpointUpsert:
		vs = []store.EndpointVersion{{ID: ch.ID, LSN: tx.CommitLSN, Row: ch.Row}}
	case cdc.EndpointDelete:
		vs = []store.EndpointVersion{{ID: ch.ID, LSN: tx.CommitLSN}}
	case cdc.EndpointTruncate:
		f.mu.RLock()
		for id := range f.lanes {
			vs = append(vs, store.EndpointVersion{ID: id, LSN: tx.CommitLSN})
		}
		f.mu.RUnlock()
		sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	}
	for _, v := range vs {
		if !f.durably(ctx, "record an endpoint change", func(ctx context.Context) error { return f.cfg.Endpoints.Record(ctx, v) }) {
			return
		}
		f.apply(ctx, v)
	}
	f.acker.AckControl(tx)
}

// apply makes v the endpoint's state from now on in the stream.
func (f *Fanout) apply(ctx context.Context, v store.EndpointVersion) {
	f.mu.RLock()
	l := f.lanes[v.ID]
	f.mu.RUnlock()
	if v.Row == nil {
		if l == nil {
			if _, ok := f.backlogs[v.ID]; ok { // created and removed while another relay led the slot
				delete(f.backlogs, v.ID)
				_ = f.durably(ctx, "drop a removed endpoint's backlog", func(ctx context.Context) error { return f.cfg.Backlog.Drop(ctx, v.ID) })
			}
			return
		}
		l.retire(ctx, "the endpoint was removed", false)
		l.release()
		l.dropBacklog(ctx)
		f.mu.Lock()
		delete(f.lanes, v.ID)
		f.mu.Unlock()
		f.route.dirty = true
		_ = f.durably(ctx, "forget a removed endpoint's status", func(ctx context.Context) error {
			return f.cfg.Endpoints.ForgetStatus(ctx, v.ID)
		})
		f.log.Info().Str("endpoint", v.ID).Str("lsn", v.LSN.String()).Msg("endpoint removed")
		return
	}
	if l == nil {
		l = newLane(f, v.ID)
		f.mu.Lock()
		f.lanes[v.ID] = l
		f.mu.Unlock()
	}
	l.applied = v.LSN
	l.update(ctx, v)
	f.route.dirty = true
}

// backfill routes the rows recorded when the slot was created, page by page, before anything
// from the stream, with the endpoints as they were then.
func (f *Fanout) backfill(ctx context.Context) error {
	if f.cfg.BackfillSlot == "" || f.cfg.Store == nil {
		return nil
	}
	tx := &cdc.Tx{Backfill: true}
	var after int64
	total := 0
	var lanes []*lane
	for ctx.Err() == nil {
		evs, last, err := f.cfg.Store.BackfillPage(ctx, f.cfg.BackfillSlot, after, backfillPage, tx.CommitLSN)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		routes := 0
		routed := make([][]*lane, len(evs))
		for i, m := range evs {
			routed[i] = append([]*lane(nil), f.routeTo(lanes[:0], m)...)
			routes += len(routed[i])
		}
		f.backfillLeft.Add(routes)
		for i, m := range evs {
			f.send(ctx, tx, m, routed[i])
		}
		select {
		case <-f.backfillLeft.Zero():
		case <-ctx.Done():
			return ctx.Err()
		}
		after, total = last, total+len(evs)
		f.log.Info().Int("delivered", total).Msg("backfill progress")
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if total > 0 {
		f.log.Info().Int("events", total).Msg("backfill complete")
	}
	return f.cfg.Store.BackfillDone(ctx, f.cfg.BackfillSlot)
}

// settled is a lane's settle: it acknowledges the event, counts down a backfill or replay
// page, and marks an event routed to several endpoints once all of them settled it.
func (f *Fanout) settled(p *Publisher, it *item) {
	if it.backlog {
		f.backlogSettled(it)
		return
	}
	if it.counted && p != nil && p.lane != nil {
		b := &p.lane.bl
		b.mu.Lock()
		if it.counted {
			it.counted = false
			b.live--
		}
		b.mu.Unlock()
	}
	switch {
	case it.tx.Backfill:
		f.backfillLeft.Done()
	default:
		f.acker.Ack(it.tx, it.m)
		if it.since {
			p.since.left.Done()
		}
	}
	f.fanMu.Lock()
	c := f.fan[it.m]
	if c == nil {
		f.fanMu.Unlock()
		return
	}
	c.settled++
	done := c.settled == c.routes
	if done {
		delete(f.fan, it.m)
	}
	f.fanMu.Unlock()
	if done && c.delivered == c.routes && f.marks != nil {
		f.marks.Done(it.m.ID, it.m.Sequence, c.retries)
	}
}

// deliveredMark is a lane's mark of a delivered event: at once when the event went to this
// endpoint alone, else counted until every endpoint settled it (settled).
func (f *Fanout) deliveredMark(it *item) {
	if it.since {
		return // a replayed row keeps its record (see observeDelivered)
	}
	if it.backlog {
		// An event that went to this endpoint alone is done now. One that went to others too is
		// done once the slot confirmed past it (every other endpoint settled it, so no restart
		// sends it again and skips it for them); before that it keeps its status.
		if f.marks != nil && (it.mark || f.cfg.Confirmed != nil && f.cfg.Confirmed() > it.tx.CommitLSN) {
			f.marks.Done(it.m.ID, it.m.Sequence, it.attempt-1)
		}
		return
	}
	f.fanMu.Lock()
	c := f.fan[it.m]
	if c != nil {
		c.delivered++
		c.retries = max(c.retries, it.attempt-1)
	}
	f.fanMu.Unlock()
	if c == nil && f.marks != nil {
		f.marks.Done(it.m.ID, it.m.Sequence, it.attempt-1)
	}
}

// Pause holds every endpoint's deliveries, as Publisher.Pause holds a pipeline's.
func (f *Fanout) Pause(reason string) {
	f.pause.mu.Lock()
	f.pause.paused, f.pause.reason = true, reason
	f.pause.mu.Unlock()
	f.m.Paused.Set(1)
	f.refreshPauses()
}

// Resume undoes Pause; endpoints paused themselves stay paused.
func (f *Fanout) Resume() {
	f.pause.mu.Lock()
	f.pause.paused, f.pause.reason = false, ""
	f.pause.mu.Unlock()
	f.m.Paused.Set(0)
	f.refreshPauses()
}

// Paused reports whether the pipeline is paused, and why.
func (f *Fanout) Paused() (bool, string) {
	f.pause.mu.Lock()
	defer f.pause.mu.Unlock()
	return f.pause.paused, f.pause.reason
}

func (f *Fanout) refreshPauses() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, l := range f.lanes {
		l.refreshPause()
	}
}

// durably runs a store write until it succeeds (see Publisher.durably).
func (f *Fanout) durably(ctx context.Context, what string, fn func(context.Context) error) bool {
	return durably(ctx, f.log, what, fn)
}

// housekeep saves the endpoints' status, rebuilds the destinations whose secret expired and
// prunes the versions log, until ctx ends.
func (f *Fanout) housekeep(ctx context.Context) {
	t := time.NewTicker(f.cfg.StatusInterval)
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.checkHealth(ctx)
		f.saveStatus(ctx)
		f.rebuildExpired(ctx)
		if f.cfg.Confirmed != nil && time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			if err := f.cfg.Endpoints.Prune(ctx, f.cfg.Confirmed()); err != nil && ctx.Err() == nil {
				f.log.Warn().Err(err).Msg("pruning the endpoint versions failed; retried in a minute")
			}
		}
	}
}

// saveStatus stores the status of the endpoints whose status changed since the last save.
func (f *Fanout) saveStatus(ctx context.Context) {
	f.mu.RLock()
	var out []store.EndpointStatus
	var saved []*lane
	for _, l := range f.lanes {
		if st, changed := l.status(); changed {
			out = append(out, st)
			saved = append(saved, l)
		}
	}
	f.mu.RUnlock()
	// The heartbeat (endpoint id ""): written at every save, so that `status --endpoints` tells
	// a stopped relay from one whose endpoints have nothing new to report.
	out = append(out, store.EndpointStatus{})
	if err := f.cfg.Endpoints.SaveStatus(ctx, out); err != nil {
		if ctx.Err() == nil {
			f.log.Warn().Err(err).Int("endpoints", len(out)).Msg("saving the endpoints' status failed; retried at the next interval")
		}
		for _, l := range saved {
			l.statusUnsaved()
		}
	}
}

func (f *Fanout) rebuildExpired(ctx context.Context) {
	now := time.Now()
	f.mu.RLock()
	var due []*lane
	for _, l := range f.lanes {
		if l.rebuildDue(now) {
			due = append(due, l)
		}
	}
	f.mu.RUnlock()
	for _, l := range due {
		l.rebuild(ctx)
	}
}

// OnlyPaused reports whether every event the endpoints hold is held by a paused endpoint (or one
// being disabled): nothing is delivered then on purpose, which is not a stall.
func (f *Fanout) OnlyPaused() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	held := false
	for _, l := range f.lanes {
		p := l.cur.Load()
		if p == nil {
			continue
		}
		if n, _ := p.sched.undelivered(); n == 0 {
			continue
		}
		if paused, _ := p.Paused(); !paused {
			return false
		}
		held = true
	}
	return held
}
