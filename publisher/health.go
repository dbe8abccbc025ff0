package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/health"
	"github.com/outbox-relay/outbox-relay/store"
)

// An endpoint's health (internal/health tracks it): its circuit breaker, how long it has been
// failing, its auto-disable once that lasts DisableAfter, and its transitions (circuit opened,
// recovered, disabled), each a log line, a count in outbox_relay_endpoint_transitions_total and,
// for disabled and recovered, an EndpointEvent for the operator (FanoutConfig.Notify).
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

// ErrDisabledAlready is what FanoutConfig.Disable returns (wrapped) when it changed nothing: the
// endpoint was disabled already (another relay, or another shard of the pipeline, disabled it
// first, or an operator did) or removed. The engine then neither notifies the operator nor
// counts the disable: whoever disabled it did, so that a disable is reported once, not once
// per shard.
var ErrDisabledAlready = errors.New("the endpoint was disabled already, or removed")

// disableOnce disables endpoint id with disable (FanoutConfig.Disable), and reports whether this
// call did.
func disableOnce(ctx context.Context, disable func(context.Context, string, string) error, id, reason string) (bool, error) {
	err := disable(ctx, id, reason)
	if errors.Is(err, ErrDisabledAlready) {
		return false, nil
	}
	return err == nil, err
}

// A lane's record of its endpoint's outage (FanoutConfig.Outage).
const (
	outageNone       = iota // none began here
	outageRecording         // its breaker opened; the record is being written
	outageRecorded          // recorded: its recovery is reported by whoever ends it
	outageUnrecorded        // the record failed: this relay reports the recovery
)

// disabledAlready reports an endpoint that this relay found disabled when it went to disable
// it: another relay or shard did, and reported it.
func (e *engine) disabledAlready(l *lane, reason string) {
	e.log.Info().Str("endpoint", l.id).Str("reason", reason).
		Msg("endpoint disabled already by another relay, shard or operator; this one does not report it again")
}

// transitions reports what an attempt's outcome changed in l's health.
func (e *engine) transitions(l *lane, ch health.Change) {
	st := l.health.Status()
	if ch.Opened && l.breaker {
		e.log.Warn().Str("lane", l.name).Int("failures_in_row", st.FailuresInRow).Str("last_error", st.LastError).
			Msg("endpoint keeps failing: its circuit breaker opened, it is probed with one attempt at a time, " +
				"1s apart doubling up to a minute, until one succeeds; its events wait, their attempts not counted")
	}
	if ch.Closed && l.breaker {
		e.log.Info().Str("lane", l.name).Msg("endpoint recovered: its circuit breaker closed, deliveries resume at full rate")
	}
	if e.tm == nil || l == e.single {
		return
	}
	if ch.FirstOpen {
		e.tm.opened.Inc()
		e.beginOutage(l)
	}
	if ch.Recovered {
		e.recovered(l, EndpointEvent{Type: EventEndpointRecovered, Pipeline: e.cfg.pipeline, Endpoint: l.id,
			FailingSince: ch.FailingSince, At: e.now, Failures: ch.Failures})
	}
}

// beginOutage records l's outage for the shards and relays of its endpoint (FanoutConfig.Outage),
// so that one of them reports its recovery.
func (e *engine) beginOutage(l *lane) {
	if e.cfg.outage == nil {
		return
	}
	id, outage := l.id, e.cfg.outage
	l.outage = outageRecording
	e.do("record an endpoint's outage", false, func(ctx context.Context) (any, error) { return outage(ctx, id, true) },
		func(_ any, err error) {
			if l.outage != outageRecording {
				return // it recovered meanwhile, and reported it (outageUnrecorded)
			}
			l.outage = outageRecorded
			if err != nil {
				l.outage = outageUnrecorded
				e.log.Warn().Err(err).Str("endpoint", id).Msg("recording an endpoint's outage failed; its recovery is reported by this relay whatever the others report")
			}
		})
}

// recovered reports that l's endpoint recovered (ev), unless another shard or relay ended its
// outage first and reported it.
func (e *engine) recovered(l *lane, ev EndpointEvent) {
	report := func() {
		e.tm.recovered.Inc()
		e.notify(ev)
	}
	state := l.outage
	l.outage = outageNone
	if e.cfg.outage == nil || state != outageRecorded {
		report() // nothing recorded that another could end: this relay reports it
		return
	}
	id, outage := l.id, e.cfg.outage
	e.do("end an endpoint's outage", false, func(ctx context.Context) (any, error) { return outage(ctx, id, false) },
		func(v any, err error) {
			switch ended, _ := v.(bool); {
			case err != nil:
				e.log.Warn().Err(err).Str("endpoint", id).Msg("ending an endpoint's outage failed; this relay reports its recovery, another may too")
				report()
			case ended:
				report()
			default:
				e.log.Info().Str("endpoint", id).Msg("endpoint recovered; another shard or relay saw it first and reports it")
			}
		})
}

// housekeep checks the endpoints' health, saves their status, rebuilds the destinations whose
// secret expired and prunes the versions log; it runs every StatusInterval.
func (e *engine) housekeep() {
	e.flushLaterMarks()
	e.checkHealth()
	e.refreshOldest()
	e.saveStatus()
	for _, l := range e.lanes {
		if l.active && !l.rebuildAt.IsZero() && !e.now.Before(l.rebuildAt) {
			e.rebuild(l)
		}
	}
	// Only the leader prunes: a relay cut off from the slot may prune, at the confirmed
	// position its successor moved, a version that successor still has to apply (it reads
	// the log at its start, then again) to read its backlog in that state (seed 12047: a pause
	// pruned, the backlog's entries written while paused delivered).
	if e.cfg.confirmed != nil && e.leading() && e.now.Sub(e.pruned) > time.Minute {
		e.pruned = e.now
		confirmed, ep := e.cfg.confirmed(), e.cfg.endpoints
		e.bestEffort("prune the endpoint versions", func(ctx context.Context) error { return ep.Prune(ctx, confirmed) })
	}
	e.after(e.now.Add(e.cfg.statusInterval), e.housekeep)
}

// checkHealth disables the endpoints that have been failing for DisableAfter (an open breaker
// attempts rarely, and a relay that restarted may attempt nothing before the time is up).
func (e *engine) checkHealth() {
	for _, l := range e.lanes {
		if !l.active || !l.health.DisableDue(e.now, e.cfg.disableAfter, l.paused) {
			continue
		}
		st := l.health.Status()
		lastError := st.LastError
		if lastError == "" {
			lastError = "none seen since the relay started"
		}
		reason := fmt.Sprintf("failing for %s (since %s; endpoint_disable_after %s); last error: %s",
			e.now.Sub(st.FailingSince).Round(time.Second), st.FailingSince.UTC().Format(time.RFC3339), e.cfg.disableAfter, lastError)
		id, disable := l.id, e.cfg.disable
		e.do("disable an endpoint that keeps failing", false, func(ctx context.Context) (any, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return disableOnce(ctx, disable, id, reason)
		}, func(v any, err error) {
			if err != nil {
				l.health.DisableFailed() // tried again at the next check
				e.log.Warn().Err(err).Str("endpoint", id).Msg("disabling an endpoint that keeps failing failed; retried shortly")
				return
			}
			if won, _ := v.(bool); !won {
				e.disabledAlready(l, reason)
				return
			}
			e.log.Warn().Str("endpoint", id).Time("failing_since", st.FailingSince).Int("failures", st.FailuresInRow).
				Str("last_error", lastError).
				Msg("endpoint disabled automatically: it failed for endpoint_disable_after; fix it, then `outbox-relay endpoint enable " + id + "`")
			e.disabled(l, reason, lastError, st)
		})
	}
}

// disabledGone reports an endpoint that answered 410 Gone and whose disable is recorded.
func (e *engine) disabledGone(l *lane, reason string) {
	e.log.Warn().Str("endpoint", l.id).Str("reason", reason).
		Msg("endpoint disabled automatically: it answered 410 Gone; `outbox-relay endpoint enable " + l.id + "` once it is back")
	e.disabled(l, reason, reason, l.health.Status())
}

func (e *engine) disabled(l *lane, reason, lastError string, st health.Status) {
	e.tm.disabled.Inc()
	e.notify(EndpointEvent{Type: EventEndpointDisabled, Pipeline: e.cfg.pipeline, Endpoint: l.id, Reason: reason,
		LastError: lastError, FailingSince: st.FailingSince, At: e.now, Failures: st.FailuresInRow})
}

// notify hands ev to the operator's webhook, if any (Notify does not block).
func (e *engine) notify(ev EndpointEvent) {
	if e.cfg.notify != nil {
		e.cfg.notify(ev)
	}
}

// laneStatus is what was last saved of a lane's status.
type laneStatus struct {
	saved   store.EndpointStatus
	unsaved bool // the last save failed
}

// status returns l's status now.
func (e *engine) status(l *lane) store.EndpointStatus {
	h := l.health.Status()
	st := store.EndpointStatus{ID: l.id, FailingSince: h.FailingSince, LastSuccess: h.LastSuccess, LastError: h.LastError,
		LastErrorAt: h.LastErrorAt, FailuresInRow: h.FailuresInRow}
	n, oldest := l.undelivered() // (a disabled endpoint's backlog is kept for its enable)
	st.Undelivered, st.OldestUndelivered = int64(n), oldest
	return st
}

// saveStatus stores the status of the endpoints whose status changed since the last save, and
// the heartbeat (endpoint id ""), written at every save, so that `status --endpoints` tells a
// stopped relay from one whose endpoints have nothing new to report.
func (e *engine) saveStatus() {
	var out []store.EndpointStatus
	var saved []*lane
	for _, l := range e.lanes {
		st := e.status(l)
		if l.status.unsaved || st != l.status.saved {
			l.status.saved, l.status.unsaved = st, false
			out, saved = append(out, st), append(saved, l)
		}
	}
	out = append(out, store.EndpointStatus{})
	ep := e.cfg.endpoints
	e.do("save the endpoints' status", false, func(ctx context.Context) (any, error) { return nil, ep.SaveStatus(ctx, out) },
		func(_ any, err error) {
			if err == nil {
				return
			}
			e.log.Warn().Err(err).Int("endpoints", len(out)).Msg("saving the endpoints' status failed; retried at the next interval")
			for _, l := range saved {
				l.status.unsaved = true
			}
		})
}
