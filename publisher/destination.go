package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// Destination is where a Publisher delivers events, one attempt at a time. *Webhook implements
// it; anything else that can accept an event (a broker) can too. The Publisher decides order,
// retries and dead letters; a Destination only sends.
type Destination interface {
	// Send makes one attempt (1-based) to deliver ev and reports what came of it. It returns
	// when ctx ends, with the attempt failed. It is called from many goroutines at once.
	Send(ctx context.Context, ev *cdc.Event, attempt int) Result
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
}

func (r Result) ok() bool { return r.Delivered }

// reason is the last error of a failed attempt, for last_error.
func (r Result) reason() string {
	if r.Err != nil {
		return r.Label + ": " + r.Err.Error()
	}
	return fmt.Sprintf("HTTP %d", r.Status)
}
