package publisher

import (
	"context"
	"sync"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// backfillPage is how many backfill events are held at once.
const backfillPage = 4096

// settle records that it will not be sent again by this process: for a streamed event the
// tracker is told; a backfill event counts down its page, a replay --since event its page.
func (p *Publisher) settle(it *item) {
	if p.fan != nil {
		p.fan.settled(p, it)
		return
	}
	if it.tx.Backfill {
		p.backfillLeft.Done()
		return
	}
	p.acker.Ack(it.tx, it.m)
	if it.since {
		p.since.left.Done()
	}
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
		evs, last, err := p.cfg.Store.BackfillPage(ctx, p.cfg.BackfillSlot, after, backfillPage, tx.CommitLSN)
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
	select {
	case <-p.backfillLeft.Zero():
		return true
	case <-ctx.Done():
		return false
	}
}

// countdown counts events not yet settled, like a sync.WaitGroup whose wait is a channel: a
// stop in the middle of a page leaves no goroutine waiting for events that never settle.
type countdown struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

// Add adds n (positive) to the count.
func (c *countdown) Add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.zero = make(chan struct{})
	}
	c.n += n
}

// Done counts one down.
func (c *countdown) Done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 {
		close(c.zero)
	}
}

// Zero returns a channel that is closed once the count is 0.
func (c *countdown) Zero() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		closed := make(chan struct{})
		close(closed)
		return closed
	}
	return c.zero
}
