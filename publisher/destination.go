package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// Destination is where a Publisher delivers events, one attempt at a time: the webhook
// (publisher/webhook), NATS JetStream (publisher/natsdest) and Kafka (publisher/kafkadest)
// implement it, and a program can plug in its own. The Publisher decides order, retries and
// dead letters; a Destination only sends. It sees the event's envelope.Message alone, never
// the stream's bookkeeping.
type Destination interface {
	// Send makes one attempt (1-based) to deliver m and reports what came of it. It returns
	// when ctx ends, with the attempt failed. It is called from many goroutines at once, and
	// must not modify m.
	Send(ctx context.Context, m *envelope.Message, attempt int) Result
}

// Result is what came of one attempt.
type Result struct {
	// Delivered is true when the destination accepted the event; it is not sent again.
	Delivered bool
	// Status is the HTTP status answered, or 0 when there was none (a network error, or a
	// destination that does not speak HTTP).
	Status int
	// RetryAfter, if positive, is how long the destination asked to wait before the next
	// attempt (an HTTP Retry-After); it is capped by Config.RetryMax. If zero, the backoff.
	RetryAfter time.Duration
	// Err says why a failed attempt failed, when Status alone does not (nil for an answer
	// that is just a non-2xx status).
	Err error
	// Label is the attempt's value of the result label of
	// outbox_relay_delivery_attempts_total: one of the Result* constants.
	Label string
	// Gone is true when the destination said it is gone for good (HTTP 410 Gone): with
	// Config.OnGone GonePause the publisher pauses its pipeline instead of retrying.
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

func (r Result) ok() bool { return r.Delivered }

// Reason is what a failed attempt leaves as the event's last_error: the result label and the
// error, or the HTTP status.
func (r Result) Reason() string {
	if r.Err != nil {
		return r.Label + ": " + r.Err.Error()
	}
	return fmt.Sprintf("HTTP %d", r.Status)
}
