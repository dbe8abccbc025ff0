package publisher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// An endpoint's health beyond its circuit breaker (scheduler_lane.go): how long it has been
// failing, its auto-disable once that lasts FanoutConfig.DisableAfter, and its transitions
// (circuit opened, recovered, disabled), each a log line, a count in
// outbox_relay_endpoint_transitions_total and, for disabled and recovered, an EndpointEvent
// for the operator (FanoutConfig.Notify).
//
// When the run of failures began (failing_since) is saved with the endpoint's status and read
// back at start, so that a relay restarted during a five-day outage disables the endpoint five
// days after it began failing, not five days after the restart.

// The EndpointEvent types.
const (
	EventEndpointDisabled  = "endpoint.disabled"
	EventEndpointRecovered = "endpoint.recovered"
)

// EndpointEvent is an operational event about an endpoint, for the operator's webhook.
type EndpointEvent struct {
	// Type is EventEndpointDisabled (disabled automatically: it failed for DisableAfter, or
	// answered 410 Gone) or EventEndpointRecovered (an attempt succeeded after its circuit
	// breaker had opened).
	Type               string
	Pipeline, Endpoint string
	// Reason is the disable's reason (disabled only).
	Reason string
	// LastError is the last failed attempt's error.
	LastError string
	// FailingSince is when the run of failures began (zero: unknown, a 410 at once).
	FailingSince time.Time
	// At is when it was disabled, or recovered.
	At time.Time
	// Failures is how many attempts failed in the run (as this relay counted them since it
	// started).
	Failures int
}

// The transitions counted.
const (
	transitionOpened    = "circuit_opened"
	transitionRecovered = "recovered"
	transitionDisabled  = "disabled"
)

// fanoutHealth is a Fanout's part of it.
type fanoutHealth struct {
	opened, recovered, disabled prometheus.Counter
	after                       time.Duration // DisableAfter, defaulted; negative: never
}

func (h *fanoutHealth) init(cfg *FanoutConfig) {
	h.after = cfg.DisableAfter
	if h.after == 0 {
		h.after = settings.EndpointDisableAfter
	}
	vec := metrics.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoint_transitions_total",
		Help: "Endpoint transitions: circuit_opened (10 failed attempts in a row), recovered (a success after the breaker opened), " +
			"disabled (automatically: failing for endpoint_disable_after, or 410 Gone).",
	}, []string{"transition"}))
	h.opened, h.recovered, h.disabled = vec.WithLabelValues(transitionOpened), vec.WithLabelValues(transitionRecovered),
		vec.WithLabelValues(transitionDisabled)
}

// laneHealth is a lane's run of failures.
type laneHealth struct {
	mu sync.Mutex
	// pub is the publisher the run belongs to: a lane started again (enabled after a disable)
	// begins a new one. Nil: none yet, or a run read back at start.
	pub       *Publisher
	since     time.Time // zero: not failing
	failures  int
	opened    bool // its breaker opened during the run
	disabling bool // the disable is written; it arrives through the stream
}

func (h *laneHealth) resetLocked() {
	h.since, h.failures, h.opened, h.disabling = time.Time{}, 0, false, false
}

// failingSince is the status's FailingSince.
func (h *laneHealth) failingSince() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since
}

// health follows an attempt's outcome (called by observe): the run of failures, and the
// transitions it makes.
func (l *lane) health(p *Publisher, o Result) {
	f, h := l.f, &l.h
	now := time.Now()
	h.mu.Lock()
	if h.pub != p {
		if h.pub != nil {
			h.resetLocked()
		}
		h.pub = p
	}
	if !o.Delivered {
		if h.since.IsZero() {
			h.since = now
		}
		h.failures++
		opened := h.failures == breakerFailures && !h.opened
		if opened {
			h.opened = true
		}
		h.mu.Unlock()
		if opened {
			f.health.opened.Inc()
		}
		return
	}
	recovered := h.opened
	ev := EndpointEvent{Type: EventEndpointRecovered, Pipeline: f.cfg.Pipeline, Endpoint: l.id, FailingSince: h.since,
		At: now, Failures: h.failures}
	h.resetLocked()
	h.mu.Unlock()
	if recovered {
		f.health.recovered.Inc()
		f.notify(ev)
	}
}

// checkHealth disables the endpoints that have been failing for DisableAfter (called by
// housekeep: an open breaker attempts rarely, and a relay that restarted may attempt nothing
// before the time is up).
func (f *Fanout) checkHealth(ctx context.Context) {
	if f.health.after < 0 {
		return
	}
	now := time.Now()
	f.mu.RLock()
	lanes := make([]*lane, 0, len(f.lanes))
	for _, l := range f.lanes {
		lanes = append(lanes, l)
	}
	f.mu.RUnlock()
	for _, l := range lanes {
		h := &l.h
		cur := l.cur.Load()
		h.mu.Lock()
		if cur == nil || h.pub != nil && h.pub != cur {
			h.resetLocked() // disabled, or started again since: the run is over
			h.pub = cur
		}
		// A paused endpoint (or pipeline) attempts nothing: it is not disabled meanwhile; once
		// resumed, a failure that goes on is counted from when it began.
		paused := false
		if cur != nil {
			paused, _ = cur.Paused()
		}
		due := !paused && !h.since.IsZero() && !h.disabling && now.Sub(h.since) >= f.health.after
		since, failures := h.since, h.failures
		if due {
			h.disabling = true
		}
		h.mu.Unlock()
		if due {
			f.autoDisable(ctx, l, since, failures, now)
		}
	}
}

// autoDisable disables l, failing since since.
func (f *Fanout) autoDisable(ctx context.Context, l *lane, since time.Time, failures int, now time.Time) {
	l.mu.Lock()
	lastError := l.st.lastError
	l.mu.Unlock()
	if lastError == "" {
		lastError = "none seen since the relay started"
	}
	reason := fmt.Sprintf("failing for %s (since %s; endpoint_disable_after %s); last error: %s",
		now.Sub(since).Round(time.Second), since.UTC().Format(time.RFC3339), f.health.after, lastError)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := f.cfg.Disable(wctx, l.id, reason)
	cancel()
	if err != nil {
		l.h.mu.Lock()
		l.h.disabling = false // tried again at the next check
		l.h.mu.Unlock()
		if ctx.Err() == nil {
			f.log.Warn().Err(err).Str("endpoint", l.id).Msg("disabling an endpoint that keeps failing failed; retried shortly")
		}
		return
	}
	f.log.Warn().Str("endpoint", l.id).Time("failing_since", since).Int("failures", failures).Str("last_error", lastError).
		Msg("endpoint disabled automatically: it failed for endpoint_disable_after; fix it, then `outbox-relay endpoint enable`")
	f.health.disabled.Inc()
	f.notify(EndpointEvent{Type: EventEndpointDisabled, Pipeline: f.cfg.Pipeline, Endpoint: l.id, Reason: reason,
		LastError: lastError, FailingSince: since, At: time.Now(), Failures: failures})
}

// goneDisable disables l, which answered 410 Gone (the lane's RecordPause).
func (l *lane) goneDisable(ctx context.Context, reason string) error {
	f := l.f
	if err := f.cfg.Disable(ctx, l.id, reason); err != nil {
		return err
	}
	l.h.mu.Lock()
	since, failures := l.h.since, l.h.failures
	l.h.mu.Unlock()
	f.log.Warn().Str("endpoint", l.id).Str("reason", reason).
		Msg("endpoint disabled automatically: it answered 410 Gone; `outbox-relay endpoint enable` once it is back")
	f.health.disabled.Inc()
	f.notify(EndpointEvent{Type: EventEndpointDisabled, Pipeline: f.cfg.Pipeline, Endpoint: l.id, Reason: reason,
		LastError: reason, FailingSince: since, At: time.Now(), Failures: failures})
	return nil
}

// loadHealth reads back when the endpoints began failing (called by load, once the lanes of
// the endpoints the log begins with exist).
func (f *Fanout) loadHealth(ctx context.Context) bool {
	var since map[string]time.Time
	if !f.durably(ctx, "read when the endpoints began failing", func(ctx context.Context) (err error) {
		since, err = f.cfg.Endpoints.FailingSince(ctx)
		return err
	}) {
		return false
	}
	for id, at := range since {
		if l := f.lanes[id]; l != nil && l.cur.Load() != nil {
			l.h.mu.Lock()
			if l.h.since.IsZero() {
				l.h.since = at
			}
			l.h.mu.Unlock()
		}
	}
	return true
}

// notify hands ev to the operator's webhook, if any (Notify does not block).
func (f *Fanout) notify(ev EndpointEvent) {
	if f.cfg.Notify != nil {
		f.cfg.Notify(ev)
	}
}
