package publisher

import (
	"context"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Batch configures batched delivery: one request carries several events (as a CloudEvents
// batch, see BatchDestination).
//
// Order is kept as without batching: an aggregate's events inside a batch are contiguous and in
// commit order (for a PartialBatchDestination, a batch holds at most one event per aggregate),
// an aggregate is in at most one batch in flight, and its next events wait for that batch's
// 2xx. A batch is all-or-nothing: any other answer retries the same batch (the
// same events) with the usual backoff, until it has failed narrowAfter times in a row; then it
// is split in halves, and so on, until a failing event stands alone. Only a lone event is
// dead-lettered (after MaxAttempts), so a poison event parks only its own aggregate.
type Batch struct {
	// MaxEvents is the most events in one request. 0 or 1: one event per request, no batching.
	MaxEvents int
	// MaxBytes bounds the summed payload sizes of a batch; an event larger than it travels
	// alone. If zero, 1 MiB.
	MaxBytes int
	// Linger is how long a batch that is not full waits for more ready events before it is
	// sent. If zero, 5ms (settings.BatchLinger, as --batch-linger and batch.linger); if
	// negative (NoLinger), it is sent with whatever is ready at once (--batch-linger 0).
	Linger time.Duration

	// onePerKey puts at most one event per aggregate in a batch: set by New for a
	// PartialBatchDestination.
	onePerKey bool
}

// Enabled reports whether requests carry more than one event.
func (b Batch) Enabled() bool { return b.MaxEvents > 1 }

func (b *Batch) defaults() {
	if b.MaxBytes <= 0 {
		b.MaxBytes = settings.BatchMaxBytes
	}
	if b.Linger == 0 {
		b.Linger = settings.BatchLinger
	}
}

// NoLinger is a Batch.Linger that sends a batch that is not full at once.
const NoLinger time.Duration = -1

// narrowAfter is the number of failed attempts in a row after which a batch of several events
// is split in halves.
const narrowAfter = 2

// BatchDestination is a Destination that can also carry several events in one request.
type BatchDestination interface {
	Destination
	// SendBatch makes one attempt to deliver ms (in this order) together: delivered means
	// every one of them was accepted. attempt is the number of attempts, this one included, of
	// the event in the batch tried most often.
	SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) Result
}

// PartialBatchDestination is a BatchDestination whose batch is not one unit: it sends each
// event of a batch as a message of its own and each is acknowledged on its own (a broker's
// per-message acknowledgements), so a batch that failed may have stored any subset of its
// events. The publisher then puts at most one event per aggregate in a batch: an aggregate
// never has two events in flight, so a partial failure can neither store an aggregate's later
// event before its earlier one nor store one behind an event that ends up dead-lettered. A
// retried batch sends its events again; the destination must make a re-send of an event it
// already stored harmless (the event id as the broker's de-duplication id).
type PartialBatchDestination interface {
	BatchDestination
	// PartialBatches marks the interface; it does nothing.
	PartialBatches()
}

// batch is one request's events, grouped by key: each group is a prefix of its key's FIFO.
type batch struct {
	items []*item
	fails int // failed attempts in a row of this composition
	// after, if set, is the rest of a one-key batch that was split: it holds the events of the
	// same key that follow, and becomes ready when this batch is delivered.
	after *batch
}

// split cuts a batch in two: between keys when it has several (both halves may go at once),
// or in the middle of its one key (the second half then waits for the first).
func (b *batch) split() (left, right *batch, chained bool) {
	n := len(b.items)
	cut, best := -1, n
	for i := 1; i < n; i++ {
		if b.items[i].key() != b.items[i-1].key() {
			if d := abs(2*i - n); d < best {
				cut, best = i, d
			}
		}
	}
	if cut < 0 {
		cut = n / 2
		right = &batch{items: append([]*item(nil), b.items[cut:]...), after: b.after}
		return &batch{items: append([]*item(nil), b.items[:cut]...), after: right}, right, true
	}
	return &batch{items: append([]*item(nil), b.items[:cut]...)}, &batch{items: append([]*item(nil), b.items[cut:]...)}, false
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// nextBatch blocks until there is work and the scheduler is not paused: a formed batch (a retry, the halves of a split, the
// rest of a split key), or else a new batch gathered from the ready heads, which waits up to
// cfg.Linger to fill. One worker gathers at a time, so ready events go into few full batches
// rather than many small ones. It returns nil once the scheduler is closed.
func (s *scheduler) nextBatch(cfg Batch) *batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.closed && (s.paused || len(s.formed) == 0 && (s.ready.len() == 0 || s.gathering)) {
		s.cond.Wait()
	}
	if s.closed {
		return nil
	}
	if len(s.formed) > 0 {
		b := s.formed[0]
		s.formed[0] = nil
		s.formed = s.formed[1:]
		return b
	}
	s.gathering = true
	defer func() {
		s.gathering = false
		s.cond.Broadcast()
	}()
	var heads []*item
	count, size := 0, 0
	full := func() bool { return count >= cfg.MaxEvents || size >= cfg.MaxBytes }
	take := func() {
		for s.ready.len() > 0 && !full() {
			h := s.ready.peek()
			if len(heads) > 0 && size+len(h.m.Payload) > cfg.MaxBytes {
				return
			}
			s.ready.pop()
			heads = append(heads, h)
			count, size = count+s.claim(cfg, h), size+len(h.m.Payload)
		}
	}
	take()
	if cfg.Linger > 0 && !full() {
		deadline := time.Now().Add(cfg.Linger)
		t := time.AfterFunc(cfg.Linger, func() {
			s.mu.Lock()
			s.gcond.Broadcast()
			s.mu.Unlock()
		})
		for !s.closed && !full() && time.Now().Before(deadline) {
			s.gcond.Wait()
			take()
			count = 0
			for _, h := range heads {
				count += s.claim(cfg, h)
			}
		}
		t.Stop()
		if s.closed {
			return nil
		}
	}
	// The heads first, then the events behind them, key by key, while they fit.
	b := &batch{}
	count, size = len(heads), 0
	for _, h := range heads {
		size += len(h.m.Payload)
	}
	for _, h := range heads {
		q := s.keys[h.key()]
		b.items = append(b.items, h)
		if cfg.onePerKey {
			continue
		}
		for i := 1; i < q.len() && count < cfg.MaxEvents; i++ {
			it := q.at(i)
			if size+len(it.m.Payload) > cfg.MaxBytes {
				break
			}
			b.items = append(b.items, it)
			count, size = count+1, size+len(it.m.Payload)
		}
	}
	return b
}

// claim is how many events the head h may bring into a batch: its key's queued events, or
// only itself with cfg.onePerKey.
func (s *scheduler) claim(cfg Batch, h *item) int {
	if cfg.onePerKey {
		return 1
	}
	return s.keys[h.key()].len()
}

// retryBatchIn makes a failed batch ready again after d, as it is. Nothing happens once the
// scheduler is closed.
func (s *scheduler) retryBatchIn(bs []*batch, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	tk := &item{} // the timer's key in s.timers
	s.timers[tk] = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.timers, tk)
		if s.closed {
			return
		}
		for _, b := range bs {
			s.pushFormed(b)
		}
	})
}

// requeueBatch makes a batch whose attempt did not count ready again at once (behind a pause).
func (s *scheduler) requeueBatch(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.pushFormed(b)
	}
}

func (s *scheduler) pushFormed(b *batch) {
	s.formed = append(s.formed, b)
	if s.lane != nil {
		s.wakeLocked()
		return
	}
	s.cond.Signal()
}

// doneBatch removes a delivered batch's events from their keys and makes what follows ready: the
// rest of a split key, or else each key's next event. It returns the keys whose replay it
// completed.
func (s *scheduler) doneBatch(b *batch) (replayed []cdc.Aggregate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := make([]cdc.Aggregate, 0, 4)
	for _, it := range b.items {
		k := it.key()
		if it.replay {
			s.replaying[k]--
			if s.replaying[k] == 0 {
				delete(s.replaying, k)
				replayed = append(replayed, k)
			}
		}
		s.keys[k].pop()
		if len(touched) == 0 || touched[len(touched)-1] != k {
			touched = append(touched, k)
		}
	}
	if b.after != nil {
		s.pushFormed(b.after)
		return replayed
	}
	for _, k := range touched {
		q := s.keys[k]
		if q.len() == 0 {
			delete(s.keys, k)
		} else {
			s.pushReady(q.peek())
		}
	}
	return replayed
}

// batchWorker delivers batches until the scheduler closes.
func (p *Publisher) batchWorker(ctx context.Context, dest BatchDestination) {
	for b := p.sched.nextBatch(p.cfg.Batch); b != nil; b = p.sched.nextBatch(p.cfg.Batch) {
		p.attemptBatch(ctx, dest, b)
	}
}

func (p *Publisher) attemptBatch(ctx context.Context, dest BatchDestination, b *batch) {
	attempt := 0
	ms := make([]*envelope.Message, len(b.items))
	for i, it := range b.items {
		it.attempt++
		attempt = max(attempt, it.attempt)
		ms[i] = it.m
	}
	p.m.Inflight.Inc()
	start := time.Now()
	o := dest.SendBatch(ctx, ms, attempt)
	elapsed := time.Since(start)
	p.m.Inflight.Dec()
	p.m.DeliveryDuration.Observe(elapsed.Seconds())
	p.m.DeliveryAttempts.WithLabelValues(o.Label).Inc()
	if o.Unblamed && !o.ok() {
		for _, it := range b.items {
			it.unblamed++
		}
	}
	if p.lane != nil {
		if !o.Unblamed {
			p.lane.observe(p, o)
		}
		p.lane.logAttempt(o, start, elapsed, b.items...)
		if !o.ok() && p.lane.spillFailedBatch(p, b) {
			return // the lane spilled meanwhile: the events are in its backlog now
		}
		if !o.ok() && p.sched.isRetired() {
			p.sched.doneBatch(b)
			for _, it := range b.items {
				p.abandonRetired(ctx, it, "the endpoint was disabled or removed while the batch was under way")
			}
			return
		}
	}
	if o.ok() {
		p.deliveredBatch(ctx, b)
		return
	}
	if o.Gone && p.cfg.OnGone == GonePause {
		p.goneBatch(ctx, b, o)
		return
	}
	p.failedBatch(ctx, b, o, elapsed, attempt)
}

// goneBatch handles a 410 Gone answer to a batch under GonePause as gone does for one event:
// the pipeline pauses, and the batch waits as formed, its attempt not counted, until a resume.
func (p *Publisher) goneBatch(ctx context.Context, b *batch, o Result) {
	for _, it := range b.items {
		it.attempt--
	}
	what := "a batch of " + strconv.Itoa(len(b.items)) + " events from " + b.items[0].m.ID
	p.pauseOnGone(ctx, what, b.items[0].m, o, func() { p.sched.requeueBatch(b) })
}

func (p *Publisher) deliveredBatch(ctx context.Context, b *batch) {
	p.m.EventsDelivered.Add(float64(len(b.items)))
	for _, it := range b.items {
		p.observeDelivered(it)
	}
	for _, agg := range p.sched.doneBatch(b) {
		p.unparkDelivered(ctx, agg)
	}
	for _, it := range b.items {
		p.settle(it)
	}
}

// failedBatch retries the batch as it is, splits it after narrowAfter failures in a row, or,
// for a lone event after MaxAttempts, dead-letters it and parks its aggregate.
func (p *Publisher) failedBatch(ctx context.Context, b *batch, o Result, elapsed time.Duration, attempt int) {
	if len(b.items) == 1 {
		it := b.items[0]
		if p.cfg.MaxAttempts > 0 && it.attempt-it.unblamed >= p.cfg.MaxAttempts && p.cfg.Store != nil {
			p.deadLetter(ctx, it, o)
			return
		}
	}
	b.fails++
	delay := nextDelay(min(b.fails, attempt), o.RetryAfter, p.cfg.RetryMin, p.cfg.RetryMax)
	first := b.items[0].m
	e := p.log.Warn().Str("first_event_id", first.ID).Int("events", len(b.items)).Int("attempt", attempt).
		Dur("duration", elapsed).Dur("retry_in", delay).Str("result", o.Label)
	if o.Err != nil {
		e = e.Str("error", o.Err.Error())
	} else {
		e = e.Int("status_code", o.Status)
	}
	if len(b.items) > 1 && b.fails >= narrowAfter {
		left, right, chained := b.split()
		e.Int("split_into", len(left.items)).Msg("batch delivery failed again; retrying it in halves to isolate the failing event")
		if chained {
			p.sched.retryBatchIn([]*batch{left}, delay)
		} else {
			p.sched.retryBatchIn([]*batch{left, right}, delay)
		}
		return
	}
	e.Msg("batch delivery failed; will retry the same batch")
	p.sched.retryBatchIn([]*batch{b}, delay)
}
