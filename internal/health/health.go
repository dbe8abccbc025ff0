// Package health follows one delivery lane's attempts (a pipeline's destination, or a partner
// endpoint) and says what they mean: how many failed in a row and since when, whether its
// circuit breaker is open, when the next probe may start, when the lane is due to be disabled,
// and which transitions an operator hears of. It is a pure tracker: it takes outcomes and
// times, returns decisions as data, and does no I/O; the engine acts on them.
//
// # The circuit breaker
//
// After Threshold failed attempts in a row the breaker opens: the lane then makes one attempt at
// a time, a probe, each at least a probe delay after the previous one failed (ProbeMin, doubling
// up to ProbeMax), until one succeeds, which closes it. Events wait meanwhile; their attempts
// are not used up by the wait.
//
// # A run of failures
//
// A run begins with the first failed attempt after a success (or at a start that found the lane
// failing: Resume) and ends with the next success, or when the lane starts again (Restart, an
// endpoint enabled after a disable). The lane is due to be disabled once its run has lasted the
// engine's disable-after; Opened and Recovered are reported once per run.
package health

import "time"

// The breaker's settings.
const (
	// Threshold is how many failed attempts in a row open the breaker.
	Threshold = 10
	// ProbeMin is the wait before the first probe; each failed probe doubles it, up to ProbeMax.
	ProbeMin = time.Second
	ProbeMax = time.Minute
)

// ProbeDelay is the wait before the n-th probe (from 0) of an open breaker.
func ProbeDelay(n int) time.Duration { return min(ProbeMin<<min(n, 6), ProbeMax) }

// Tracker is one lane's health. The zero value is a lane that has not failed.
type Tracker struct {
	failures    int
	since       time.Time
	lastSuccess time.Time
	lastError   string
	lastErrorAt time.Time
	open        bool
	probing     bool
	probes      int
	probeAt     time.Time
	opened      bool // the breaker opened during this run
	disabling   bool
	runFailures int // failed attempts in this run (Recovered reports them)
	startedAt   time.Time
}

// Outcome is what one attempt came to.
type Outcome struct {
	OK bool
	// Gone: the destination said it is gone for good (HTTP 410).
	Gone bool
	// Reason is why a failed attempt failed (its last_error).
	Reason string
}

// Change is what an attempt's outcome changed, for the engine to act on and report.
type Change struct {
	// Opened: the breaker opened (the Threshold-th failure in a row); FirstOpen: for the first
	// time in this run (counted as a circuit_opened transition).
	Opened, FirstOpen bool
	// Closed: a success closed the open breaker.
	Closed bool
	// Recovered: a success ended a run in which the breaker had opened (an endpoint.recovered
	// event); FailingSince and Failures describe the run.
	Recovered    bool
	FailingSince time.Time
	Failures     int
	// Gone: the destination said it is gone; the engine pauses or disables the lane.
	Gone bool
}

// Observe takes the outcome of an attempt that ended at now.
func (t *Tracker) Observe(now time.Time, o Outcome) Change {
	if o.OK {
		c := Change{Closed: t.open, Recovered: t.opened}
		if c.Recovered {
			c.FailingSince, c.Failures = t.since, t.runFailures
		}
		t.lastSuccess = now
		t.failures, t.open, t.probes = 0, false, 0
		t.endRun()
		return c
	}
	t.lastError, t.lastErrorAt = o.Reason, now
	t.failures++
	t.runFailures++
	if t.since.IsZero() {
		t.since = now
	}
	c := Change{Gone: o.Gone}
	if !t.open && t.failures >= Threshold {
		t.open, t.probes, t.probeAt = true, 0, now.Add(ProbeDelay(0))
		c.Opened, c.FirstOpen = true, !t.opened
		t.opened = true
	}
	return c
}

func (t *Tracker) endRun() {
	t.since, t.runFailures, t.opened, t.disabling = time.Time{}, 0, false, false
}

// Startable reports whether an attempt may start at now with busy attempts under way: always
// while the breaker is closed; while it is open, one probe at a time, not before its time. When
// it may not only because the probe's time has not come, wake is that time.
func (t *Tracker) Startable(now time.Time, busy int) (ok bool, wake time.Time) {
	switch {
	case !t.open:
		return true, time.Time{}
	case busy > 0:
		return false, time.Time{}
	case now.Before(t.probeAt):
		return false, t.probeAt
	}
	return true, time.Time{}
}

// Started records that an attempt starts: while the breaker is open, it is the probe.
func (t *Tracker) Started() { t.probing = t.open }

// Released records that an attempt's outcome was observed. After a probe that failed (the
// breaker still open) the next probe waits longer; it returns when that one may start (zero
// otherwise).
func (t *Tracker) Released(now time.Time) (next time.Time) {
	if t.open && t.probing {
		t.probes++
		t.probeAt = now.Add(ProbeDelay(t.probes))
		next = t.probeAt
	}
	t.probing = false
	return next
}

// Open reports whether the breaker is open.
func (t *Tracker) Open() bool { return t.open }

// Restart begins a new run: the lane started again (an endpoint enabled after a disable). Its
// breaker closes, and the count of its failures restarts.
func (t *Tracker) Restart(now time.Time) {
	t.failures, t.open, t.probes, t.probing = 0, false, 0, false
	t.startedAt = now
	t.endRun()
}

// Resume sets when the run began as a relay that ran the lane before recorded it (the status
// read back at start), so that the disable-after counts from then, not from this start.
func (t *Tracker) Resume(since time.Time) {
	if t.since.IsZero() {
		t.since = since
	}
}

// DisableDue reports whether the lane has been failing for after (negative: never) at now and
// is not being disabled already; if so it records that the disable is under way. A paused lane
// makes no attempts and is never due.
func (t *Tracker) DisableDue(now time.Time, after time.Duration, paused bool) bool {
	if after < 0 || paused || t.since.IsZero() || t.disabling || now.Sub(t.since) < after {
		return false
	}
	t.disabling = true
	return true
}

// DisableFailed records that the disable could not be written: it is due again at the next
// check.
func (t *Tracker) DisableFailed() { t.disabling = false }

// Failing reports whether the last attempt failed, or none succeeded since the lane started
// (a lane that caught up with its backlog rejoins the stream only after a success).
func (t *Tracker) Failing() bool {
	return t.failures > 0 || t.lastSuccess.Before(t.startedAt)
}

// Status is what the tracker knows for the lane's status.
type Status struct {
	FailuresInRow            int
	FailingSince             time.Time
	LastSuccess, LastErrorAt time.Time
	LastError                string
}

// Status returns the lane's status.
func (t *Tracker) Status() Status {
	return Status{FailuresInRow: t.failures, FailingSince: t.since, LastSuccess: t.lastSuccess, LastErrorAt: t.lastErrorAt,
		LastError: t.lastError}
}

// Progress is when the lane last made progress: its last success, or its start when none
// came since.
func (t *Tracker) Progress() time.Time {
	if t.lastSuccess.Before(t.startedAt) {
		return t.startedAt
	}
	return t.lastSuccess
}
