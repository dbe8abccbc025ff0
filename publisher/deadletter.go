package publisher

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
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
	keys := make([]string, len(aggs))
	for i, a := range aggs {
		keys[i] = a.Key()
	}
	p.sched.setParked(keys)
	if len(keys) > 0 {
		p.log.Warn().Int("parked_aggregates", len(keys)).Msg("aggregates are parked behind dead letters; run `outbox-relay replay` once the endpoint accepts them")
	}
}

// deadLetter records a head that failed MaxAttempts times, parks its aggregate with every event
// queued behind it, and acknowledges them all: the slot moves on while the rows keep what a
// replay needs. If the record cannot be written before ctx ends (the relay is stopping), nothing
// is acknowledged: the event and those behind it stay unconfirmed, and the next run sends them.
func (p *Publisher) deadLetter(ctx context.Context, it *item, o Result) {
	ev := it.ev
	reason := o.reason()
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	stored := p.durably(ctx, "dead-letter event", func(ctx context.Context) error {
		return p.cfg.Store.DeadLetter(ctx, ev, it.attempt, reason)
	})
	if !stored {
		p.log.Warn().Str("event_id", ev.ID).Int("attempt", it.attempt).
			Msg("stopping before the dead letter was stored; the event stays unconfirmed and is sent again at the next start")
		return
	}
	behind := p.sched.park(it)
	evs := make([]*cdc.Event, len(behind))
	for i, b := range behind {
		evs[i] = b.ev
	}
	p.settleParked(ctx, evs)
	p.m.EventsDeadLettered.Inc()
	p.log.Error().Str("event_id", ev.ID).Str("aggregate_type", ev.AggregateType).Str("aggregate_id", ev.AggregateID).
		Str("event_type", ev.EventType).Int("attempt", it.attempt).Str("last_error", reason).Int("parked_behind", len(evs)).
		Msg("event dead-lettered; its aggregate is parked until `outbox-relay replay`")
	p.settle(ev)
}

// settleParked durably marks events of parked aggregates, then acknowledges them. If the marks
// cannot be written before ctx ends, the events are not acknowledged: they stay unconfirmed.
func (p *Publisher) settleParked(ctx context.Context, evs []*cdc.Event) {
	if len(evs) == 0 {
		return
	}
	if !p.durably(ctx, "park events", func(ctx context.Context) error { return p.cfg.Store.Park(ctx, evs) }) {
		p.log.Warn().Int("events", len(evs)).
			Msg("stopping before parked events were stored; they stay unconfirmed and are handled at the next start")
		return
	}
	for _, ev := range evs {
		p.settle(ev)
	}
}

// replay handles a replay request at its place in the stream: each parked aggregate it names
// gets its failed and parked events queued, in commit order, ahead of everything later. A
// request whose reads or writes do not complete before ctx ends is not acknowledged, so the next
// run handles it again.
func (p *Publisher) replay(ctx context.Context, req *cdc.Event) {
	p.parkMu.Lock()
	defer p.parkMu.Unlock()
	if !p.mine(req) {
		p.acker.Ack(req) // another pipeline's request: every slot carries every message
		return
	}
	for _, agg := range req.Replay {
		if !p.sched.isParked(agg.Key()) || p.cfg.Store == nil {
			p.log.Info().Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Msg("replay request for an aggregate that is not parked; ignored")
			continue
		}
		var evs []*cdc.Event
		if !p.durably(ctx, "load replay", func(ctx context.Context) (err error) {
			evs, err = p.cfg.Store.Replayable(ctx, agg, req.Tx)
			return err
		}) {
			return // stopping: the request stays unconfirmed
		}
		p.acker.Grow(req.Tx, evs)
		p.sched.unpark(agg.Key(), evs)
		if len(evs) == 0 && !p.durably(ctx, "unpark aggregate", func(ctx context.Context) error {
			return p.cfg.Store.Unpark(ctx, agg)
		}) {
			return // stopping: the request stays unconfirmed, and the aggregate is still parked in the table
		}
		p.log.Info().Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Int("events", len(evs)).Msg("replaying")
	}
	p.acker.Ack(req)
}

// durably runs a store write until it succeeds, and reports whether it did: the event it
// concerns must not be acknowledged before it is recorded. It gives up only when ctx ends; the
// caller then leaves the event unacknowledged, so it stays unconfirmed and the next run handles
// it again.
func (p *Publisher) durably(ctx context.Context, what string, f func(context.Context) error) bool {
	wait := 10 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.log.Warn().Err(err).Dur("retry_in", wait).Msgf("%s failed; retrying", what)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// mine reports whether a replay request names this publisher's pipeline.
func (p *Publisher) mine(req *cdc.Event) bool {
	name, want := p.cfg.Pipeline, req.ReplayPipeline
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
	ev := it.ev
	reason := o.reason()
	if p.cfg.Store != nil {
		rec, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := p.cfg.Store.Abandoned(rec, ev, it.attempt, reason); err != nil {
			p.log.Warn().Err(err).Str("event_id", ev.ID).Msg("recording an abandoned shadow event failed")
		}
		cancel()
	}
	p.m.EventsAbandoned.Inc()
	p.log.Warn().Str("event_id", ev.ID).Str("aggregate_type", ev.AggregateType).Str("aggregate_id", ev.AggregateID).
		Str("event_type", ev.EventType).Int("attempt", it.attempt).Str("last_error", reason).
		Msg("shadow delivery abandoned after its last attempt; the event is settled, nothing is parked")
	p.sched.done(it)
	p.settle(ev)
}
