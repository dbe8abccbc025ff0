package publisher

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Config configures a Publisher.
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
	// Store keeps dead letters and parked aggregates; needed for MaxAttempts and replays.
	Store Store
	// Resume, if set, skips events that an earlier process delivered (see Resume).
	Resume *Resume
	// Backfill, if set, is the slot whose recorded backfill is delivered before the stream.
	BackfillSlot string
	// Batch, if its MaxEvents is above 1 and the destination is a BatchDestination, sends
	// several events per request (see Batch). The zero value sends one event per request.
	Batch Batch
	// LogPayloads adds the event's payload to the log line of a failed attempt. Off by
	// default: payloads may hold personal data.
	LogPayloads bool
	Logger      zerolog.Logger
	// Pipeline is the name of the pipeline this publisher delivers for: it obeys only the replay
	// requests that name it, and names it in log lines and in the pause a 410 Gone writes.
	// Empty: DefaultPipeline ("default").
	Pipeline string
	// Shadow makes delivery best effort: after MaxAttempts failed attempts (which must then be
	// positive) the event is recorded as abandoned (Store.Abandoned, a log line,
	// outbox_relay_events_abandoned_total) and settled; its aggregate is never parked. False
	// (the default): dead letters park, as described at MaxAttempts.
	Shadow bool
	// RateLimit, if positive, bounds the attempts started in any one-second window to this
	// many, retries included. Zero (the default): unlimited.
	RateLimit int
	// Registerer receives the publisher's series (outbox_relay_events_delivered_total,
	// _delivery_attempts_total, _parked_aggregates, ...; see docs/reference/metrics.md). If
	// nil, they are registered nowhere. Wrap it with prometheus.WrapRegistererWith to label one
	// publisher's series among several.
	Registerer prometheus.Registerer
	// OnGone is what a 410 Gone answer (Result.Gone) does. The zero value, GonePause, pauses
	// the pipeline and leaves the event undelivered and not parked.
	OnGone GoneAction
	// RecordPause, if set, durably records a pause the publisher decides itself (on 410 Gone),
	// so that it holds across restarts and in whichever process leads next (the relay writes
	// that). If nil, the pause holds in this process only.
	RecordPause func(ctx context.Context, reason string) error
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

// Marks records delivered rows with their stream position (Sequence); *Marker implements it.
// It must not block.
type Marks interface {
	Done(id, seq string, retries int)
}

// Publisher delivers events in order per key with up to MaxInFlight concurrent attempts.
type Publisher struct {
	cfg   Config
	dest  Destination
	acker Acker
	marks Marks
	sched *scheduler
	// parkMu makes parking (a dead letter and the events behind it) and replaying atomic with
	// respect to each other.
	parkMu sync.Mutex
	// backfillLeft counts backfill events of the current page not yet settled.
	backfillLeft countdown
	log          zerolog.Logger
	m            *publisherMetrics
	limit        *windowLimiter // nil: no rate limit
	pause        pauseState
	since        sinceRun

	// Set on the publisher of one endpoint of a Fanout (newLane): fan settles and marks its
	// events, lane is told each attempt's outcome, queued is the pool's (pool.mu), and accept,
	// if set, drops the rows of a replay --since outside the endpoint's subscription.
	fan    *Fanout
	lane   *lane
	queued bool
	accept func(*envelope.Message) bool
}

// New returns a Publisher that sends to dest (a webhook.Destination, for example),
// acknowledges to acker and records marks. marks may be nil.
func New(cfg Config, dest Destination, acker Acker, marks Marks) *Publisher {
	cfg.defaults()
	m := newPublisherMetrics(cfg.Registerer)
	sched := newScheduler()
	sched.parkedGauge = m.ParkedAggregates
	if _, ok := dest.(PartialBatchDestination); ok {
		cfg.Batch.onePerKey = true
	}
	p := &Publisher{cfg: cfg, dest: dest, acker: acker, marks: marks, sched: sched, log: cfg.Logger, m: m}
	if cfg.RateLimit > 0 {
		p.limit = newWindowLimiter(cfg.RateLimit, time.Second)
	}
	return p
}

// Run takes transactions from in and delivers their events until ctx is done. Then it starts
// nothing new, lets attempts in flight finish for up to ShutdownTimeout, stops its retry timers
// and returns; nothing it started outlives it. Events not delivered by then stay unconfirmed,
// so the next run sends them. Run it once.
func (p *Publisher) Run(ctx context.Context, in <-chan *cdc.Tx) {
	p.loadParked(ctx)
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()
	var wg sync.WaitGroup
	for i := 0; i < p.cfg.MaxInFlight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if bd, ok := p.dest.(BatchDestination); ok && p.cfg.Batch.Enabled() {
				p.batchWorker(hard, bd)
				return
			}
			p.worker(hard)
		}()
	}
	if err := p.backfill(ctx); err != nil {
		p.log.Error().Err(err).Msg("backfill stopped; it resumes at the next start")
	}
	p.intake(ctx, in)
	p.sched.close()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(p.cfg.ShutdownTimeout):
		p.log.Warn().Dur("shutdown_timeout", p.cfg.ShutdownTimeout).Msg("cancelling deliveries still in flight")
		cancelHard()
		<-finished
	}
}

func (p *Publisher) intake(ctx context.Context, in <-chan *cdc.Tx) {
	for {
		select {
		case <-ctx.Done():
			return
		case tx := <-in:
			p.take(ctx, tx, in)
		}
	}
}

// take queues a transaction's events, after a restart first dropping those an earlier process
// already delivered (see Resume).
func (p *Publisher) take(ctx context.Context, tx *cdc.Tx, in <-chan *cdc.Tx) {
	p.cfg.Resume.take(ctx, tx, in, p.queue)
}

// queue hands a transaction's events to the scheduler in order, and carries out its control
// records at their places among them: replay requests unpark their aggregates. Events of
// parked aggregates are parked durably, and events already delivered by an earlier process
// are acknowledged without sending.
func (p *Publisher) queue(ctx context.Context, tx *cdc.Tx, delivered map[string]bool) {
	var parked []*item
	next := 0 // the next control record
	for i, m := range tx.Events {
		for ; next < len(tx.Controls) && tx.Controls[next].At <= i; next++ {
			p.settleParked(ctx, parked)
			parked = nil
			p.control(ctx, tx, &tx.Controls[next])
		}
		it := &item{m: m, tx: tx}
		switch {
		case delivered[m.ID]:
			p.m.EventsSkipped.Inc()
			p.settle(it)
		case !p.sched.add(it):
			parked = append(parked, it)
		}
	}
	p.settleParked(ctx, parked)
	for ; next < len(tx.Controls); next++ {
		p.control(ctx, tx, &tx.Controls[next])
	}
}

// control carries out a control record of tx at its place in the stream.
func (p *Publisher) control(ctx context.Context, tx *cdc.Tx, c *cdc.Control) {
	switch {
	case c.Replay != nil && c.Replay.SinceRequest != 0:
		p.replaySince(ctx, tx, c.Replay)
	case c.Replay != nil:
		p.replay(ctx, tx, c.Replay)
	default:
		p.acker.AckControl(tx) // a kind this publisher does not act on
	}
}

func (p *Publisher) worker(ctx context.Context) {
	for it := p.sched.next(); it != nil; it = p.sched.next() {
		p.attempt(ctx, it)
	}
}

func (p *Publisher) attempt(ctx context.Context, it *item) {
	if p.limit != nil && !p.limit.wait(ctx) {
		p.sched.retryIn(it, 0) // stopping: hand the head back; the closed scheduler drops it
		return
	}
	it.attempt++
	p.m.Inflight.Inc()
	start := time.Now()
	o := p.dest.Send(ctx, it.m, it.attempt)
	elapsed := time.Since(start)
	p.m.Inflight.Dec()
	p.m.DeliveryDuration.Observe(elapsed.Seconds())
	p.m.DeliveryAttempts.WithLabelValues(o.Label).Inc()
	if o.Unblamed && !o.ok() {
		it.unblamed++
	}
	if p.lane != nil {
		if !o.Unblamed {
			p.lane.observe(p, o)
		}
		p.lane.logAttempt(o, start, elapsed, it)
		if !o.ok() && p.lane.spillFailed(p, it) {
			return // the lane spilled meanwhile: the event is in its backlog now
		}
		if !o.ok() && p.sched.isRetired() {
			p.sched.done(it)
			p.abandonRetired(ctx, it, "the endpoint was disabled or removed while the attempt was under way")
			return
		}
	}
	if o.ok() {
		p.delivered(ctx, it)
		return
	}
	if o.Gone && p.cfg.OnGone == GonePause {
		p.gone(ctx, it, o)
		return
	}
	p.failed(ctx, it, o, elapsed)
}

func (p *Publisher) delivered(ctx context.Context, it *item) {
	p.m.EventsDelivered.Inc()
	p.observeDelivered(it)
	if p.sched.done(it) {
		p.unparkDelivered(ctx, it.key())
	}
	p.settle(it)
}

// observeDelivered records a delivered event's end-to-end latency and its mark.
func (p *Publisher) observeDelivered(it *item) {
	if !it.tx.CommitTime.IsZero() && !it.replay {
		p.m.EndToEnd.Observe(time.Since(it.tx.CommitTime).Seconds())
	}
	// A row a replay --since re-sent keeps its record: it was selected for being done (or
	// failed or parked). Marking it again would rewrite every row of the range, a WAL record
	// each that every walsender decodes, and move its processed_at, which retention counts from.
	if p.fan != nil {
		p.fan.deliveredMark(it)
	} else if p.marks != nil && !it.since {
		p.marks.Done(it.m.ID, it.m.Sequence, it.attempt-1)
	}
}

// unparkDelivered forgets agg as parked once its replay is delivered. The events were delivered,
// so they are acknowledged either way; if the row cannot be removed before the relay stops, the
// aggregate loads as parked at the next start and a replay (which finds nothing left to send)
// unparks it.
func (p *Publisher) unparkDelivered(ctx context.Context, agg cdc.Aggregate) {
	_ = p.durably(ctx, "unpark aggregate", func(ctx context.Context) error { return p.cfg.Store.Unpark(ctx, agg) })
	p.log.Info().Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Msg("replay delivered; aggregate unparked")
}

// failed logs the attempt and schedules the next one, or dead-letters the event after
// MaxAttempts; the key stays busy meanwhile.
func (p *Publisher) failed(ctx context.Context, it *item, o Result, elapsed time.Duration) {
	counted := it.attempt - it.unblamed
	if p.cfg.Shadow && p.cfg.MaxAttempts > 0 && counted >= p.cfg.MaxAttempts {
		p.abandon(ctx, it, o)
		return
	}
	if p.cfg.MaxAttempts > 0 && counted >= p.cfg.MaxAttempts && p.cfg.Store != nil {
		p.deadLetter(ctx, it, o)
		return
	}
	delay := nextDelay(it.attempt, o.RetryAfter, p.cfg.RetryMin, p.cfg.RetryMax)
	e := p.log.Warn().Str("event_id", it.m.ID).Str("aggregate_type", it.m.AggregateType).
		Str("aggregate_id", it.m.AggregateID).Str("event_type", it.m.EventType).Int("attempt", it.attempt).
		Dur("duration", elapsed).Dur("retry_in", delay).Str("result", o.Label)
	if o.Err != nil {
		e = e.Str("error", o.Err.Error())
	} else {
		e = e.Int("status_code", o.Status)
	}
	if p.cfg.LogPayloads {
		e = e.RawJSON("payload", it.m.Payload)
	}
	e.Str("lsn", it.tx.CommitLSN.String()).Msg("delivery failed; will retry")
	p.sched.retryIn(it, delay)
}
