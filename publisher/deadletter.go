package publisher

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// loadParked restores the parked aggregates, so parking survives restarts. If ctx ends before
// the database answers, it restores nothing: Run is stopping and takes nothing from the stream.
func (p *Publisher) loadParked(ctx context.Context) {
	if p.cfg.Store == nil {
		return
	}
	var aggs []cdc.Aggregate
	loaded := p.durably(ctx, "load parked aggregates", func(ctx context.Context) (err error) {
		aggs, err = p.cfg.Store.Parked(ctx)
		return err
	})
	if !loaded {
		return // stopping before the database answered: nothing was taken from the stream
	}
	p.sched.setParked(aggs)
	if len(aggs) > 0 {
		p.log.Warn().Int("parked_aggregates", len(aggs)).Msg("aggregates are parked behind dead letters; run `outbox-relay replay` once the endpoint accepts them")
	}
}

// deadLetter records a head that failed MaxAttempts times, parks its aggregate with every event
// queued behind it, and acknowledges them all: the slot moves on while the rows keep what a
// replay needs. If the record cannot be written before ctx ends (the relay is stopping), nothing
// is acknowledged: the event and those behind it stay unconfirmed, and the next run sends them.
func (p *Publisher) deadLetter(ctx context.Context, it *item, o Result) {
	m := it.m
	reason := o.Reason()
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	stored := p.durably(ctx, "dead-letter event", func(ctx context.Context) error {
		return p.cfg.Store.DeadLetter(ctx, m, it.attempt, reason)
	})
	if !stored {
		p.log.Warn().Str("event_id", m.ID).Int("attempt", it.attempt).
			Msg("stopping before the dead letter was stored; the event stays unconfirmed and is sent again at the next start")
		return
	}
	behind := p.sched.park(it)
	p.settleParked(ctx, behind)
	p.m.EventsDeadLettered.Inc()
	p.log.Error().Str("event_id", m.ID).Str("aggregate_type", m.AggregateType).Str("aggregate_id", m.AggregateID).
		Str("event_type", m.EventType).Int("attempt", it.attempt).Str("last_error", reason).Int("parked_behind", len(behind)).
		Msg("event dead-lettered; its aggregate is parked until `outbox-relay replay`")
	p.settle(it)
}

// settleParked durably marks events of parked aggregates, then acknowledges them. If the marks
// cannot be written before ctx ends, the events are not acknowledged: they stay unconfirmed.
func (p *Publisher) settleParked(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	ms := make([]*envelope.Message, len(its))
	for i, it := range its {
		ms[i] = it.m
	}
	if !p.durably(ctx, "park events", func(ctx context.Context) error { return p.cfg.Store.Park(ctx, ms) }) {
		p.log.Warn().Int("events", len(its)).
			Msg("stopping before parked events were stored; they stay unconfirmed and are handled at the next start")
		return
	}
	for _, it := range its {
		p.settle(it)
	}
}

// replay handles a replay request of tx at its place in the stream: each parked aggregate it
// names gets its failed and parked events queued, in commit order, ahead of everything later.
// A request whose reads or writes do not complete before ctx ends is not acknowledged, so the
// next run handles it again.
func (p *Publisher) replay(ctx context.Context, tx *cdc.Tx, req *cdc.ReplayRequest) {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	if !p.mine(req.Pipeline) {
		p.acker.AckControl(tx) // another pipeline's request: every slot carries every message
		return
	}
	for _, agg := range req.Aggregates {
		if !p.sched.isParked(agg) || p.cfg.Store == nil {
			p.log.Info().Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Msg("replay request for an aggregate that is not parked; ignored")
			continue
		}
		var ms []*envelope.Message
		if !p.durably(ctx, "load replay", func(ctx context.Context) (err error) {
			ms, err = p.cfg.Store.Replayable(ctx, agg, tx)
			return err
		}) {
			return // stopping: the request stays unconfirmed
		}
		p.acker.Grow(tx, ms)
		p.sched.unpark(agg, tx, ms)
		if len(ms) == 0 && !p.durably(ctx, "unpark aggregate", func(ctx context.Context) error {
			return p.cfg.Store.Unpark(ctx, agg)
		}) {
			return // stopping: the request stays unconfirmed, and the aggregate is still parked in the table
		}
		p.log.Info().Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Int("events", len(ms)).Msg("replaying")
	}
	p.acker.AckControl(tx)
}

// durably runs a store write until it succeeds, and reports whether it did: the event it
// concerns must not be acknowledged before it is recorded. It gives up only when ctx ends; the
// caller then leaves the event unacknowledged, so it stays unconfirmed and the next run handles
// it again.
func (p *Publisher) durably(ctx context.Context, what string, f func(context.Context) error) bool {
	return durably(ctx, p.log, what, f)
}

// durably is Publisher.durably with the logger that reports each failed try.
func durably(ctx context.Context, log zerolog.Logger, what string, f func(context.Context) error) bool {
	done := false // the write that succeeded counts even if ctx ended as it did
	_ = retry.Do(ctx, retry.Backoff{First: 10 * time.Millisecond, Max: 10 * time.Second}, func(ctx context.Context) error {
		err := f(ctx)
		done = err == nil
		return err
	}, func(err error, wait time.Duration) {
		log.Warn().Err(err).Dur("retry_in", wait).Msgf("%s failed; retrying", what)
	})
	return done
}

// mine reports whether a replay request for pipeline (empty: "default") names this publisher's.
func (p *Publisher) mine(pipeline string) bool {
	name, want := p.cfg.Pipeline, pipeline
	if name == "" {
		name = "default"
	}
	if want == "" {
		want = "default"
	}
	return name == want
}

// abandon gives up on a shadow pipeline's event after its last attempt: the failure is recorded
// (best effort: a shadow never holds the slot for its own bookkeeping), and the event is settled
// like a delivered one, so the next event of its aggregate goes ahead.
func (p *Publisher) abandon(ctx context.Context, it *item, o Result) {
	m := it.m
	reason := o.Reason()
	if p.cfg.Store != nil {
		rec, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := recordAbandoned(rec, p.cfg.Store, m, it.attempt, reason); err != nil {
			p.log.Warn().Err(err).Str("event_id", m.ID).Msg("recording an abandoned shadow event failed")
		}
		cancel()
	}
	p.m.EventsAbandoned.Inc()
	p.log.Warn().Str("event_id", m.ID).Str("aggregate_type", m.AggregateType).Str("aggregate_id", m.AggregateID).
		Str("event_type", m.EventType).Int("attempt", it.attempt).Str("last_error", reason).
		Msg("shadow delivery abandoned after its last attempt; the event is settled, nothing is parked")
	p.sched.done(it)
	p.settle(it)
}

// recordAbandoned records an abandoned shadow event, again while its row is not visible yet
// (errNotVisible: the stream can hand over a transaction a moment before its commit is visible
// to other sessions, longer on a loaded server), until ctx ends.
func recordAbandoned(ctx context.Context, store Store, m *envelope.Message, attempt int, reason string) error {
	wait := 20 * time.Millisecond
	for {
		err := store.Abandoned(ctx, m, attempt, reason)
		if !errors.Is(err, errNotVisible) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
