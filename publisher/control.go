package publisher

import (
	"fmt"
)

// DefaultPipeline is the name of the pipeline when none is given.
const DefaultPipeline = "default"

// GoneAction is what a 410 Gone answer does.
type GoneAction int

const (
	// GonePause pauses the pipeline and leaves the event undelivered and not parked, as the
	// Standard Webhooks spec asks (stop sending to an endpoint that says it is gone), until
	// `outbox-relay resume`.
	GonePause GoneAction = iota
	// GoneRetry treats 410 like any other failed attempt: retried with backoff, dead-lettered
	// after MaxAttempts.
	GoneRetry
)

// ParseGoneAction parses "pause" or "retry".
func ParseGoneAction(s string) (GoneAction, error) {
	switch s {
	case "pause", "":
		return GonePause, nil
	case "retry":
		return GoneRetry, nil
	}
	return 0, fmt.Errorf("on_gone %q: use pause or retry", s)
}

// String returns "pause" or "retry".
func (a GoneAction) String() string {
	if a == GoneRetry {
		return "retry"
	}
	return "pause"
}
