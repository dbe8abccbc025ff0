package publisher

import (
	"context"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// backfillPage is how many backfill events are held at once.
const backfillPage = 4096

// settle records that ev will not be sent again by this process: for a streamed event the
// tracker is told; a backfill event counts down its page.
func (p *Publisher) settle(ev *cdc.Event) {
	if ev.Tx.Backfill {
		p.backfillLeft.Done()
		return
	}
	p.acker.Ack(ev)
}

// backfill delivers the rows recorded when the slot was created (pending rows the stream will
// never carry), page by page in their recorded order, before anything from the stream is
// queued; so per aggregate they go out before its streamed events. Delivered rows are marked
// done like any other, so a restart resumes with what is still pending.
func (p *Publisher) backfill(ctx context.Context) error {
	if p.cfg.BackfillSlot == "" || p.cfg.Store == nil {
		return nil
	}
	tx := &cdc.Tx{Backfill: true}
	var after int64
	total := 0
	for ctx.Err() == nil {
		evs, last, err := p.cfg.Store.BackfillPage(ctx, p.cfg.BackfillSlot, after, backfillPage, tx)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		p.backfillLeft.Add(len(evs))
		tx.Events = evs
		p.queue(ctx, tx, nil)
		if !p.waitBackfill(ctx) {
			return ctx.Err()
		}
		after, total = last, total+len(evs)
		p.log.Info().Int("delivered", total).Msg("backfill progress")
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if total > 0 {
		p.log.Info().Int("events", total).Msg("backfill complete")
	}
	return p.cfg.Store.BackfillDone(ctx, p.cfg.BackfillSlot)
}

// waitBackfill waits for the current page to settle, or ctx to end.
func (p *Publisher) waitBackfill(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { p.backfillLeft.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
