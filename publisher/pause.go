package publisher

import (
	"context"
	"sync"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// pauseState is whether the publisher is paused, and why; the scheduler holds the heads back.
type pauseState struct {
	mu     sync.Mutex
	paused bool
	reason string
}

// Pause stops handing events to the destination: attempts under way finish (a delivered event
// is acknowledged as usual), nothing new starts, and retry timers that fire queue their event
// behind the pause. Events keep arriving until the buffer is full; then the stream stops reading
// (it keeps answering the server), and the slot keeps its position. Pause is idempotent; a
// second call only updates the reason.
func (p *Publisher) Pause(reason string) {
	p.pause.mu.Lock()
	defer p.pause.mu.Unlock()
	p.pause.paused, p.pause.reason = true, reason
	p.sched.setPaused(true)
	if p.fan == nil {
		p.m.Paused.Set(1)
	}
}

// Resume undoes Pause: the events held are sent, in order per aggregate.
func (p *Publisher) Resume() {
	p.pause.mu.Lock()
	defer p.pause.mu.Unlock()
	p.pause.paused, p.pause.reason = false, ""
	p.sched.setPaused(false)
	if p.fan == nil {
		p.m.Paused.Set(0)
	}
}

// Paused reports whether the publisher is paused, and why.
func (p *Publisher) Paused() (bool, string) {
	p.pause.mu.Lock()
	defer p.pause.mu.Unlock()
	return p.pause.paused, p.pause.reason
}

// gone handles a 410 Gone answer under GonePause: the pipeline pauses (durably, through
// RecordPause), and the event goes back to the head of its key, undelivered and not parked, its
// attempt not counted towards MaxAttempts; `outbox-relay resume` sends it again.
func (p *Publisher) gone(ctx context.Context, it *item, o Result) {
	it.attempt--
	p.pauseOnGone(ctx, "event "+it.m.ID, it.m, o, func() { p.sched.requeue(it) })
}

// pauseOnGone pauses the pipeline for a 410 Gone answer to what (an event, a batch), puts back
// what was sent with requeue (behind the pause), records the pause durably and logs it.
func (p *Publisher) pauseOnGone(ctx context.Context, what string, first *envelope.Message, o Result, requeue func()) {
	reason := "the endpoint answered 410 Gone (" + what + "): it says it is gone; resume once it accepts events again"
	p.Pause(reason)
	requeue()
	recorded := p.cfg.RecordPause == nil || p.durably(ctx, "record pause", func(ctx context.Context) error {
		return p.cfg.RecordPause(ctx, reason)
	})
	p.logGone(first, o, recorded)
}

func (p *Publisher) logGone(m *envelope.Message, o Result, recorded bool) {
	e := p.log.Error().Str("pipeline", p.cfg.Pipeline).Str("event_id", m.ID).Str("aggregate_type", m.AggregateType).
		Str("aggregate_id", m.AggregateID).Int("status_code", o.Status).Bool("pause_recorded", recorded)
	e.Msgf("the endpoint answered 410 Gone: pipeline %q is paused, nothing is sent and the event stays undelivered; "+
		"once the endpoint accepts events again, resume the pipeline with `outbox-relay resume`", p.cfg.Pipeline)
}
