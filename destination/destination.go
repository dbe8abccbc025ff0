// Package destination is the contract between the delivery engine (package publisher) and the
// places it delivers to: the interfaces a destination implements (Destination, BatchDestination,
// PartialBatchDestination), the Result of one attempt, and the Opener that connects one. The
// webhook (destination/webhook), NATS JetStream (destination/natsdest) and Kafka
// (destination/kafkadest) implement it beside it, and so can a program's own.
//
// # A leaf
//
// The package imports the message type (package envelope) and the standard library only, and so
// does what a destination needs from it: a destination sees an envelope.Message and answers a
// Result, never the stream's transactions, the engine's queues or its stores. A layout test keeps
// it so, and keeps every destination free of the stream (cdc), pgx and the relay's SQL.
//
// # What the engine does and what a destination does
//
// The engine decides order, batching, retries, rate limits, the circuit breaker, dead letters and
// what is confirmed; a destination only sends and says what came of it. Send is called from many
// goroutines at once; a destination that orders by itself (a broker's per-message
// acknowledgements) says so by implementing PartialBatchDestination, and the engine then puts at
// most one event per aggregate in a batch.
package destination

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// Destination is where the engine delivers events, one attempt at a time: the webhook
// (destination/webhook), NATS JetStream (destination/natsdest) and Kafka (destination/kafkadest)
// implement it, and a program can plug in its own. It sees the event's envelope.Message alone,
// never the stream's bookkeeping.
type Destination interface {
	// Send makes one attempt (1-based) to deliver m and reports what came of it. It returns
	// when ctx ends, with the attempt failed. It is called from many goroutines at once, and
	// must not modify m.
	Send(ctx context.Context, m *envelope.Message, attempt int) Result
}

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
// events. The engine then puts at most one event per aggregate in a batch: an aggregate never
// has two events in flight, so a partial failure can neither store an aggregate's later event
// before its earlier one nor store one behind an event that ends up dead-lettered. A retried
// batch sends its events again; the destination must make a re-send of an event it already
// stored harmless (the event id as the broker's de-duplication id).
type PartialBatchDestination interface {
	BatchDestination
	// PartialBatches marks the interface; it does nothing.
	PartialBatches()
}

// Result is what came of one attempt.
type Result struct {
	// Delivered is true when the destination accepted the event; it is not sent again.
	Delivered bool
	// Status is the HTTP status answered, or 0 when there was none (a network error, or a
	// destination that does not speak HTTP).
	Status int
	// RetryAfter, if positive, is how long the destination asked to wait before the next
	// attempt (an HTTP Retry-After); the engine caps it by its RetryMax. If zero, the backoff.
	RetryAfter time.Duration
	// Err says why a failed attempt failed, when Status alone does not (nil for an answer
	// that is just a non-2xx status).
	Err error
	// Label is the attempt's value of the result label of
	// outbox_relay_delivery_attempts_total: one of the Result* constants.
	Label string
	// Gone is true when the destination said it is gone for good (HTTP 410 Gone): the engine
	// then pauses the pipeline, or disables the endpoint, instead of retrying.
	Gone bool
	// Answer is the start of a failed answer's body (up to 1024 bytes), for the delivery log.
	// Nil: none, or a destination that does not keep it.
	Answer []byte
	// Unblamed marks a failure that is not the destination's (the relay's egress proxy could
	// not be reached or refused the tunnel): the attempt is retried with backoff, but it does
	// not count toward the endpoint's circuit breaker, its failures in a row and auto-disable,
	// or the event's MaxAttempts. False: an ordinary failed attempt.
	Unblamed bool
}

// Reason is what a failed attempt leaves as the event's last_error: the result label and the
// error, or the HTTP status.
func (r Result) Reason() string {
	if r.Err != nil {
		return r.Label + ": " + r.Err.Error()
	}
	return fmt.Sprintf("HTTP %d", r.Status)
}

// Attempt results, the values of the result label of outbox_relay_delivery_attempts_total and
// of Result.Label.
const (
	ResultSuccess = "success"
	Result3xx     = "http_3xx"
	Result4xx     = "http_4xx"
	Result5xx     = "http_5xx"
	ResultTimeout = "timeout"
	ResultNetwork = "network"
	// ResultRejected is a broker destination's answer that refused the message (a JetStream
	// API error such as a full stream, a Kafka error code); it is retried like a 5xx.
	ResultRejected = "rejected"
	// ResultProxy is a failure of the relay's own outbound proxy (an endpoint's egress proxy
	// refused or could not be reached): the attempt is retried and is not the endpoint's failure
	// (Result.Unblamed). It is counted only once it happens, so Results leaves it out.
	ResultProxy = "proxy"
)

// Results are the Result* labels, in the order the metrics list them.
var Results = []string{ResultSuccess, Result3xx, Result4xx, Result5xx, ResultTimeout, ResultNetwork, ResultRejected}
