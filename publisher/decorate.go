package publisher

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// Cross-cutting concerns wrap a lane's destination, as pgstream wraps its processors: the
// metrics of each attempt (its result, its duration, the attempts in flight) and, when the
// engine keeps one, the delivery log (every attempt of every event, per endpoint). The attempt
// flow itself has no branch for either.

// observer is told of an attempt as it starts and as it ends.
type observer interface {
	started()
	ended(ms []*envelope.Message, attempt int, r destination.Result, at time.Time, took time.Duration)
}

// decorate wraps d with the lane's observers: the metrics always, the delivery log when the
// engine has one.
func (e *engine) decorate(l *lane, d destination.Destination) destination.Destination {
	obs := []observer{attemptMetrics{e.m}}
	if e.cfg.deliveryLog != nil {
		obs = append(obs, deliveryLog{log: e.cfg.deliveryLog, pipeline: e.cfg.pipeline, endpoint: l.id})
	}
	w := &observed{inner: d, obs: obs, clock: e.cfg.clock}
	switch d.(type) {
	case destination.PartialBatchDestination:
		return partialObserved{batchObserved{w}}
	case destination.BatchDestination:
		return batchObserved{w}
	}
	return w
}

// observed is a destination whose attempts its observers see.
type observed struct {
	inner destination.Destination
	obs   []observer
	clock func() time.Time
}

func (o *observed) around(ms []*envelope.Message, attempt int, send func() destination.Result) destination.Result {
	for _, ob := range o.obs {
		ob.started()
	}
	start := o.clock()
	r := send()
	took := o.clock().Sub(start)
	for _, ob := range o.obs {
		ob.ended(ms, attempt, r, start, took)
	}
	return r
}

// Send implements destination.Destination.
func (o *observed) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	return o.around([]*envelope.Message{m}, attempt, func() destination.Result { return o.inner.Send(ctx, m, attempt) })
}

type batchObserved struct{ *observed }

// SendBatch implements destination.BatchDestination.
func (o batchObserved) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	bd := o.inner.(destination.BatchDestination)
	return o.around(ms, attempt, func() destination.Result { return bd.SendBatch(ctx, ms, attempt) })
}

type partialObserved struct{ batchObserved }

// PartialBatches implements destination.PartialBatchDestination.
func (partialObserved) PartialBatches() {}

// attemptMetrics writes the attempts' series.
type attemptMetrics struct{ m *publisherMetrics }

func (a attemptMetrics) started() { a.m.Inflight.Inc() }

func (a attemptMetrics) ended(_ []*envelope.Message, _ int, r destination.Result, _ time.Time, took time.Duration) {
	a.m.Inflight.Dec()
	a.m.DeliveryDuration.Observe(took.Seconds())
	a.m.DeliveryAttempts.WithLabelValues(r.Label).Inc()
}

// deliveryLog records each event's attempt in the delivery log.
type deliveryLog struct {
	log                store.DeliveryLog
	pipeline, endpoint string
}

func (deliveryLog) started() {}

func (d deliveryLog) ended(ms []*envelope.Message, attempt int, r destination.Result, at time.Time, took time.Duration) {
	a := store.DeliveryAttempt{Pipeline: d.pipeline, Endpoint: d.endpoint, Attempt: attempt, At: at, Status: r.Status, Latency: took}
	if !r.Delivered {
		a.Error = r.Reason()
		if len(r.Answer) > 0 {
			a.Error += ": " + string(r.Answer)
		}
	}
	for _, m := range ms {
		if m.ID == "" {
			continue // a replay request resent with its transaction: no event
		}
		a.EventID = m.ID
		if r.Delivered {
			d.log.Delivered(a)
		} else {
			d.log.Failed(a)
		}
	}
}
