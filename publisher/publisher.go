package publisher

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/store"
)

// Config configures the engine of a pipeline with one destination (New).
type Config struct {
	// MaxInFlight is the number of concurrent deliveries. If zero, 64 (settings.MaxInFlight).
	MaxInFlight int
	// RetryMin is the first retry delay. If zero, 1s.
	RetryMin time.Duration
	// RetryMax caps retry delays, including Retry-After. If zero, 10m.
	RetryMax time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight deliveries after its context is
	// done; then they are cancelled. If zero, 10s.
	ShutdownTimeout time.Duration
	// MaxAttempts dead-letters an event after this many failed attempts and parks its
	// aggregate (needs Store). If zero, about a day of retries at RetryMax
	// (settings.AttemptsForADay), or 5 for a Shadow; if negative, events are retried forever
	// (not allowed for a Shadow: it is then 5).
	MaxAttempts int
	// Store keeps dead letters and parked aggregates, the backfill and the replays since a time;
	// needed for MaxAttempts, BackfillSlot and replays. Nil: none of them.
	Store store.Pipeline
	// Resume, if set, skips events that an earlier process delivered (see Resume).
	Resume *Resume
	// BackfillSlot, if set, is the slot whose recorded backfill is delivered before the stream.
	BackfillSlot string
	// Batch, if its MaxEvents is above 1 and the destination is a BatchDestination, sends
	// several events per request (see Batch). The zero value sends one event per request.
	Batch Batch
	// LogPayloads adds the event's payload to the log line of a failed attempt. Off by
	// default: payloads may hold personal data.
	LogPayloads bool
	Logger      zerolog.Logger
	// Pipeline is the name of the pipeline this engine delivers for: it obeys only the replay
	// requests that name it, and names it in log lines and in the pause a 410 Gone writes.
	// Empty: DefaultPipeline ("default").
	Pipeline string
	// Shadow makes delivery best effort: after MaxAttempts failed attempts (which must then be
	// positive) the event is recorded as abandoned (Store.Abandoned, a log line,
	// outbox_relay_events_abandoned_total) and settled; its aggregate is never parked. An
	// abandoned event can be sent once more, after later events of its aggregate, by the relay
	// that next reads it (after a restart or takeover, before the slot confirmed past it or its
	// backlog page was deleted): the record is best effort and is not looked up. False (the
	// default): dead letters park, as described at MaxAttempts.
	Shadow bool
	// RateLimit, if positive, bounds the attempts started in any one-second window to this
	// many, retries included. Zero (the default): unlimited.
	RateLimit int
	// Shard and Shards say which shard of how many this engine delivers, when the pipeline is
	// sharded (one engine per shard, all sending to the one destination): RateLimit is split
	// among the shards, this one taking its share, so that the destination sees at most
	// RateLimit a second from them together (below Shards, one attempt every Shards/RateLimit
	// seconds each). Zero Shards (or 1): not sharded, the whole RateLimit.
	Shard, Shards int
	// Registerer receives the engine's series (outbox_relay_events_delivered_total,
	// _delivery_attempts_total, _parked_aggregates, ...; see docs/reference/metrics.md). If
	// nil, they are registered nowhere. Wrap it with prometheus.WrapRegistererWith to label one
	// pipeline's series among several.
	Registerer prometheus.Registerer
	// OnGone is what a 410 Gone answer (Result.Gone) does. The zero value, GonePause, pauses
	// the pipeline and leaves the event undelivered and not parked.
	OnGone GoneAction
	// RecordPause, if set, durably records a pause the engine decides itself (on 410 Gone), so
	// that it holds across restarts and in whichever process leads next (the relay writes
	// that). If nil, the pause holds in this process only.
	RecordPause func(ctx context.Context, reason string) error
	// NoBreaker turns the circuit breaker off. The zero value (false) has it on: after 10
	// failed attempts in a row the destination is probed with one attempt at a time, 1s apart
	// doubling up to a minute, until one succeeds (internal/health), instead of every event
	// retrying on its own.
	NoBreaker bool
	// Backlog, if set, keeps the pipeline's backlog off the WAL: once its oldest undelivered
	// event has waited SpillAfter (or it holds SpillSize events and delivers none for a second),
	// its events are written there and the slot confirms past them (backlog.go). Nil (the
	// default): the destination holds the slot while it holds events.
	Backlog store.Backlog
	// SpillAfter and SpillSize are the spill's thresholds, with Backlog. Zero: 30s and 1000.
	SpillAfter time.Duration
	SpillSize  int
	// Confirmed returns the position the slot confirmed; with Backlog, an event read from the
	// backlog is marked done only once it is past it. Nil: such an event keeps its status.
	Confirmed func() pglogrepl.LSN
	// DeliveryLog, if set, records every attempt (store.DeliveryLog; pgstore.DeliveryLog keeps
	// it in PostgreSQL), with the endpoint id "". Nil (the default): nothing is recorded.
	DeliveryLog store.DeliveryLog
	// Slot, if set, says whether this process's stream holds the slot (a *cdc.Stream): the
	// pipeline delivers, spills and records only while it does, and catches up with what
	// another relay did meanwhile when it holds it again (Slot). Nil: as if it always held it.
	Slot Slot
}

// Slot is the streaming side of the slot, as the engine needs it (cdc.Stream implements it).
// A relay that loses the slot (its connection fails) starts no attempt and writes nothing of its
// own, since another relay may lead the slot; when its stream holds the slot again, in a new
// session, it first drops what the slot confirmed meanwhile (that relay settled it) and brings
// its endpoints, backlogs and parked aggregates up to date (intake.go: followSession).
type Slot interface {
	// Session returns the streaming session that holds the slot now (from 1, as cdc.Tx's
	// Session), 0 while the stream does not hold it.
	Session() uint64
	// SessionFrom returns the slot's confirmed position as the last session started.
	SessionFrom() pglogrepl.LSN
}

func (c *Config) defaults() {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = settings.MaxInFlight
	}
	if c.RetryMin <= 0 {
		c.RetryMin = settings.RetryMin
	}
	if c.RetryMax <= 0 {
		c.RetryMax = settings.RetryMax
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = settings.ShutdownTimeout
	}
	switch {
	case c.Shadow && c.MaxAttempts <= 0:
		c.MaxAttempts = settings.ShadowMaxAttempts
	case c.MaxAttempts == 0:
		c.MaxAttempts = settings.AttemptsForADay(c.RetryMin, c.RetryMax)
	}
	c.Batch.defaults()
	if c.Pipeline == "" {
		c.Pipeline = DefaultPipeline
	}
}

// FanoutConfig configures the engine of a pipeline that delivers to the partner endpoints of
// outbox_endpoints (NewFanout). The delivery settings are the pipeline's, applied to every
// endpoint; an endpoint's row sets its own URL, secrets, scheme, format, batching, rate limit,
// in-flight cap and spill_after.
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
	// Registerer receives the aggregate series (those of Config, summed over endpoints) and
	// the endpoint series (docs/reference/metrics.md). Nil: registered nowhere.
	Registerer prometheus.Registerer
	// Store is the pipeline's store, for its backfill (BackfillSlot).
	Store        store.Pipeline
	BackfillSlot string
	// Resume, if set, skips what an earlier process delivered: events marked done, and, with
	// its History, each (event, endpoint) delivery the delivery log recorded.
	Resume *Resume
	// DeliveryLog, if set, records every attempt of every endpoint (pgstore.DeliveryLog keeps
	// it in PostgreSQL). Nil: nothing is recorded.
	DeliveryLog store.DeliveryLog
	// Endpoints keeps the versions log and the endpoints' status. Required.
	Endpoints store.Endpoints
	// LaneStore returns the store of the lane named name (its dead letters, parked aggregates
	// and replays). Required.
	LaneStore func(name string) store.Pipeline
	// Open builds an endpoint's destination from its row (the JSON of to_jsonb), and returns
	// what releases it and when it must be built again (a secret expires; zero: never). An
	// error makes every attempt of the endpoint fail with it, so that it shows in its status and
	// its events retry until it is fixed. Required.
	Open func(id string, row []byte) (dest destination.Destination, release func(), rebuildAt time.Time, err error)
	// Disable disables endpoint id with reason (a 410 Gone, or failing for DisableAfter): its
	// row changes, and the change reaches every relay through the stream. It returns an error
	// wrapping ErrDisabledAlready when it changed nothing (disabled already, or removed): the
	// operator is then not notified by this engine. Required.
	Disable func(ctx context.Context, id, reason string) error
	// Outage records an endpoint's outage where every shard and relay of it sees it: began
	// (its circuit breaker opened here) records it unless it is recorded already; !began (it
	// recovered here) ends it and reports whether this call did. Of several shards that see the
	// endpoint recover, the one that ended the outage reports endpoint.recovered (Notify and the
	// recovered transition); the others report nothing. Nil: each engine reports the recoveries
	// it sees (right with one shard).
	Outage func(ctx context.Context, id string, began bool) (ended bool, err error)
	// Confirmed returns the position the slot confirmed, to prune the versions log and to mark
	// an event read from a backlog. Nil: never pruned, and such an event keeps its status.
	Confirmed func() pglogrepl.LSN
	// MetricsEndpoints are endpoints whose series are always exported; MetricsMax bounds the
	// others to the most troubled ones. Zero MetricsMax: 20 (settings.EndpointMetricsMax); a
	// negative one exports none beyond MetricsEndpoints.
	MetricsEndpoints []string
	MetricsMax       int
	// StatusInterval is how often the endpoints' status is saved. Zero: 5s.
	StatusInterval time.Duration
	// Backlog keeps the endpoints' backlogs off the WAL (backlog.go). Nil: an endpoint never
	// spills, and holds the slot while it holds events.
	Backlog store.Backlog
	// SpillAfter is how long an endpoint's oldest undelivered event waits before the endpoint
	// spills to its backlog, unless its row sets spill_after_ms. Zero: 30s
	// (settings.EndpointSpillAfter).
	SpillAfter time.Duration
	// SpillSize is how many events an endpoint holds, delivering none for a second, before it
	// spills. Zero: 1000 (settings.EndpointSpillSize).
	SpillSize int
	// MaxBufferedEvents is the buffer of the tracker the engine acknowledges to (the stream
	// stops reading once it holds that many events). An endpoint holds at most its fair share
	// of it, the buffer divided among the endpoints holding events (at least 100 events): one
	// that would hold more spills to its Backlog at once. Zero: 8192
	// (settings.MaxBufferedEvents); negative: no fair share.
	MaxBufferedEvents int
	// DisableAfter is how long an endpoint fails without a success before it is disabled
	// automatically. Zero: 120h, five days (settings.EndpointDisableAfter); negative: never.
	DisableAfter time.Duration
	// Notify, if set, receives the endpoints' operational events (disabled, recovered); it must
	// not block.
	Notify func(EndpointEvent)
	// Slot, if set, says whether this process's stream holds the slot (a *cdc.Stream): the
	// endpoints are delivered, spilled and recorded only while it does (see Slot). Nil: as if
	// it always held it.
	Slot Slot
	// Shard and Shards say which shard of how many this engine delivers, when the pipeline is
	// sharded (one engine per shard, each delivering its aggregates to every endpoint): each
	// endpoint's rate_limit and in-flight cap (its row's max_in_flight, else
	// EndpointMaxInFlight) are split among the shards, this one taking its share, so that the
	// shards together hold them (a cap below Shards still lets each shard one request). Zero
	// Shards (or 1): not sharded, each endpoint's whole limits.
	Shard, Shards int
}

// Acker is told about every settled event and control record, and about the events a replay
// request stands for; cdc.Tracker implements it.
type Acker interface {
	// Ack settles m, an event of tx.
	Ack(tx *cdc.Tx, m *envelope.Message)
	// AckControl settles one control record of tx, once carried out.
	AckControl(tx *cdc.Tx)
	// Grow adds to tx the events one of its control records stands for, before that record is
	// settled.
	Grow(tx *cdc.Tx, ms []*envelope.Message)
}

// Marks records delivered rows with their stream position (Sequence); pgstore.Marker
// implements it. It must not block. If it has a method Flushed() bool, a replay since a time
// waits (up to 10s) until it reports every mark written.
type Marks interface {
	Done(id, seq string, retries int)
}

// engineConfig is Config and FanoutConfig resolved, defaults applied.
type engineConfig struct {
	pipeline                     string
	workers, endpointMaxInFlight int
	retryMin, retryMax           time.Duration
	maxAttempts                  int
	shutdownTimeout              time.Duration
	logPayloads, shadow          bool
	onGone                       GoneAction
	recordPause                  func(ctx context.Context, reason string) error
	store                        store.Pipeline
	backfillSlot                 string
	resume                       *Resume
	deliveryLog                  store.DeliveryLog
	endpoints                    store.Endpoints
	laneStore                    func(name string) store.Pipeline
	open                         func(id string, row []byte) (destination.Destination, func(), time.Time, error)
	disable                      func(ctx context.Context, id, reason string) error
	outage                       func(ctx context.Context, id string, began bool) (bool, error)
	confirmed                    func() pglogrepl.LSN
	statusInterval               time.Duration
	backlog                      store.Backlog
	spillAfter                   time.Duration
	buffer                       int // the tracker's buffer in events, shared fairly by the endpoints (0: not)
	spillSize                    int
	disableAfter                 time.Duration
	notify                       func(EndpointEvent)
	clock                        func() time.Time
	trace                        func(format string, args ...any) // the simulation's trace of decisions; nil: none
	slot                         Slot
	shard, shards                int // this engine's shard, of shards (0 or 1: not sharded)
}

// Publisher is the delivery engine of one pipeline: its deterministic core (engine) and the
// driver that runs it (driver.go). New builds it for one destination, NewFanout for the partner
// endpoints of outbox_endpoints; either way it is one engine, whose one destination is a lane
// of its own.
type Publisher struct {
	shutdown time.Duration
	owner
}

// Fanout is a Publisher that delivers to the partner endpoints (NewFanout).
//
// Deprecated: it is a Publisher; use Publisher.
type Fanout = Publisher

// New returns the engine of a pipeline with one destination (a webhook.Destination, for
// example) that acknowledges to acker and records marks (nil: none).
func New(cfg Config, dest destination.Destination, acker Acker, marks Marks) *Publisher {
	cfg.defaults()
	ec := engineConfig{pipeline: cfg.Pipeline, workers: cfg.MaxInFlight, retryMin: cfg.RetryMin, retryMax: cfg.RetryMax,
		maxAttempts: cfg.MaxAttempts, shutdownTimeout: cfg.ShutdownTimeout, logPayloads: cfg.LogPayloads, shadow: cfg.Shadow,
		onGone: cfg.OnGone, recordPause: cfg.RecordPause, store: cfg.Store, backfillSlot: cfg.BackfillSlot, resume: cfg.Resume,
		deliveryLog: cfg.DeliveryLog, confirmed: cfg.Confirmed, backlog: cfg.Backlog, spillAfter: cfg.SpillAfter,
		spillSize: cfg.SpillSize, clock: time.Now, slot: cfg.Slot}
	e := newEngine(ec, cfg.Logger, newPublisherMetrics(cfg.Registerer), acker, marks, time.Now(), rand.Float64)
	l := e.single
	l.store, l.maxInFlight, l.breaker = cfg.Store, cfg.MaxInFlight, !cfg.NoBreaker
	if _, ok := dest.(destination.BatchDestination); ok && cfg.Batch.Enabled() {
		l.batching = cfg.Batch
	}
	l.setRateLimit(rateShare(cfg.RateLimit, cfg.Shard, cfg.Shards))
	l.setDest(dest)
	return &Publisher{shutdown: cfg.ShutdownTimeout, owner: owner{e: e}}
}

// NewFanout returns the engine of a pipeline that delivers to the partner endpoints, acknowledging
// to acker and marking to marks (nil: no marks).
func NewFanout(cfg FanoutConfig, acker Acker, marks Marks) *Publisher {
	c := Config{RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax, MaxAttempts: cfg.MaxAttempts, ShutdownTimeout: cfg.ShutdownTimeout,
		Pipeline: cfg.Pipeline}
	c.defaults()
	ec := engineConfig{pipeline: cfg.Pipeline, workers: cfg.Workers, endpointMaxInFlight: cfg.EndpointMaxInFlight,
		retryMin: c.RetryMin, retryMax: c.RetryMax, maxAttempts: c.MaxAttempts, shutdownTimeout: c.ShutdownTimeout,
		logPayloads: cfg.LogPayloads, store: cfg.Store, backfillSlot: cfg.BackfillSlot, resume: cfg.Resume,
		deliveryLog: cfg.DeliveryLog, endpoints: cfg.Endpoints, laneStore: cfg.LaneStore, open: cfg.Open, disable: cfg.Disable, outage: cfg.Outage,
		confirmed: cfg.Confirmed, statusInterval: cfg.StatusInterval, backlog: cfg.Backlog, spillAfter: cfg.SpillAfter,
		spillSize: cfg.SpillSize, disableAfter: cfg.DisableAfter, notify: cfg.Notify, clock: time.Now, slot: cfg.Slot,
		shard: cfg.Shard, shards: cfg.Shards, buffer: cfg.MaxBufferedEvents}
	ec.fanoutDefaults()
	max := cfg.MetricsMax
	if max == 0 {
		max = settings.EndpointMetricsMax
	}
	e := newEngine(ec, cfg.Logger, newPublisherMetrics(cfg.Registerer), acker, marks, time.Now(), rand.Float64)
	e.tm = newTransitionMetrics(cfg.Registerer)
	p := &Publisher{shutdown: c.ShutdownTimeout, owner: owner{e: e}}
	named := map[string]bool{}
	for _, id := range cfg.MetricsEndpoints {
		named[id] = true
	}
	newEndpointMetrics(cfg.Registerer, cfg.MetricsEndpoints, max, func() endpointSnapshot {
		p.mu.Lock()
		defer p.mu.Unlock()
		s := p.e.endpointSnapshot(named)
		s.now = time.Now()
		return s
	})
	return p
}

func (c *engineConfig) fanoutDefaults() {
	if c.workers <= 0 {
		c.workers = settings.EndpointWorkers
	}
	if c.endpointMaxInFlight <= 0 {
		c.endpointMaxInFlight = settings.EndpointMaxInFlight
	}
	if c.statusInterval <= 0 {
		c.statusInterval = 5 * time.Second
	}
	if c.disableAfter == 0 {
		c.disableAfter = settings.EndpointDisableAfter
	}
	switch {
	case c.buffer == 0:
		c.buffer = settings.MaxBufferedEvents
	case c.buffer < 0:
		c.buffer = 0
	}
	c.onGone = GonePause
}

// newEngine returns an engine at now; a pipeline without endpoints (cfg.endpoints nil) has its
// one lane, whose destination the caller sets.
func newEngine(cfg engineConfig, log zerolog.Logger, m *publisherMetrics, acker Acker, marks Marks, now time.Time,
	rnd func() float64) *engine {
	if cfg.spillAfter <= 0 {
		cfg.spillAfter = settings.EndpointSpillAfter
	}
	if cfg.spillSize <= 0 {
		cfg.spillSize = settings.EndpointSpillSize
	}
	if cfg.clock == nil {
		cfg.clock = time.Now
	}
	e := &engine{cfg: cfg, now: now, rand: rnd, log: log, m: m, acker: acker, marks: marks, byID: map[string]*lane{},
		fan: map[*envelope.Message]*fanCount{}, spillChecked: now, fair: fairShare{buffer: cfg.buffer}}
	e.in.resume = cfg.resume != nil && (cfg.resume.Delivered != nil || cfg.resume.History != nil)
	if cfg.endpoints != nil {
		e.ep = &endpointState{e: e}
		return e
	}
	l := newLane(e, "", cfg.pipeline)
	l.started = now // active once its parked aggregates are loaded (loadParked)
	l.health.Restart(now)
	e.single, e.lanes, e.byID[""] = l, []*lane{l}, l
	e.routed = []*lane{l}
	return e
}

// start queues what the engine does before it takes the stream: its parked aggregates, the
// endpoints' versions, the backfill; and arms its periodic timers.
func (e *engine) start(now time.Time) {
	e.now = now
	if e.ep != nil {
		e.first(e.ep.load, e.backfill)
		e.after(now.Add(e.cfg.statusInterval), e.housekeep)
	} else {
		e.first(e.loadParked, e.loadBacklog, e.backfill)
	}
	if e.cfg.backlog != nil {
		e.after(now.Add(backlogTick), e.backlogTick)
	}
	if e.cfg.slot != nil {
		e.after(now.Add(sessionTick), e.sessionTick)
	}
	e.pump()
}

// sessionTick is how often the engine looks whether its stream holds the slot in a new session
// (followSession; the tick pumps).
const sessionTick = time.Second

func (e *engine) sessionTick() { e.after(e.now.Add(sessionTick), e.sessionTick) }

// loadParked restores the one lane's parked aggregates, so parking survives restarts.
func (e *engine) loadParked() {
	l := e.single
	st := l.store
	if st == nil {
		l.active = true
		return
	}
	e.hold("load parked aggregates", func(ctx context.Context) (any, error) { return st.Parked(ctx) }, func(v any) {
		var aggs []cdc.Aggregate
		for _, a := range v.([]store.Aggregate) {
			aggs = append(aggs, cdc.Aggregate(a))
		}
		(&endpointState{e: e}).setParked(l, aggs)
		l.active = true
		e.wake(l)
	})
}

// loadBacklog finds whether the one lane spilled before this start: it then reads its backlog
// first.
func (e *engine) loadBacklog() {
	bl := e.cfg.backlog
	if bl == nil {
		return
	}
	e.hold("read the backlog", func(ctx context.Context) (any, error) { return bl.Sizes(ctx) }, func(v any) {
		if b := v.(map[string]store.BacklogSize)[""]; b.Entries > 0 {
			l := e.single
			l.bl.on, l.bl.written, l.bl.entries = true, b.Last, b.Entries
		}
	})
}

// stop makes the engine start nothing new: attempts under way finish (a delivered one settles),
// timers and store operations that end after it do nothing.
func (e *engine) stop() { e.stopping = true }

// Pause stops handing events to the destinations: attempts under way finish (a delivered event
// is acknowledged as usual), nothing new starts, and retry timers that fire queue their event
// behind the pause. Events keep arriving until the buffer is full; then the stream stops reading
// (it keeps answering the server), and the slot keeps its position. Pause is idempotent; a
// second call only updates the reason. An endpoint paused itself stays paused on Resume.
func (p *Publisher) Pause(reason string) {
	p.step(func(e *engine) { e.pause(true, reason, time.Now()) })
}

// Resume undoes Pause: the events held are sent, in order per aggregate.
func (p *Publisher) Resume() { p.step(func(e *engine) { e.pause(false, "", time.Now()) }) }

// Paused reports whether the pipeline is paused, and why.
func (p *Publisher) Paused() (paused bool, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.e.paused, p.e.pauseReason
}

// OnlyPaused reports whether every event the lanes hold is held by a paused lane: nothing is
// delivered then on purpose, which is not a stall.
func (p *Publisher) OnlyPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := false
	for _, l := range p.e.lanes {
		if l.queued == 0 || !l.active {
			continue
		}
		if !l.paused {
			return false
		}
		held = true
	}
	return held
}

// HeldByEndpoints reports whether every event the lanes hold is held by an endpoint that answers
// for it: one that is paused, or failing (its last attempt failed). Nothing delivered is then the
// endpoints' doing, which each one's own series (outbox_relay_endpoint_failures_in_row,
// _oldest_undelivered_seconds) and alert report, not a stall of the relay: /readyz is about the
// relay. For a pipeline with one destination it is OnlyPaused: its destination failing is the
// pipeline's stall.
func (p *Publisher) HeldByEndpoints() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := false
	for _, l := range p.e.lanes {
		if !l.active || l.queued == 0 && len(l.bl.buf) == 0 && len(l.bl.writing) == 0 {
			continue
		}
		if !l.paused && (l == p.e.single || l.health.Status().FailuresInRow == 0) {
			return false
		}
		held = true
	}
	return held
}
