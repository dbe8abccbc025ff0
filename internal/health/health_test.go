package health

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one input to a tracker and what it must answer.
type step struct {
	name string
	at   time.Duration
	do   string // "ok", "fail", "gone", "start", "release", "restart", "due", "disable-failed"
	busy int    // for start: attempts under way

	want        Change        // for ok, fail, gone
	startable   bool          // for start
	wake        time.Duration // for start: when a probe may start (0: none)
	nextProbe   time.Duration // for release (0: none)
	due         bool          // for due
	dueAfter    time.Duration // for due (0: a day)
	failing     bool          // after the step
	checkStatus bool
	failures    int // with checkStatus
}

func run(t *testing.T, steps []step) {
	t.Helper()
	var tr Tracker
	tr.Restart(t0.Add(-time.Minute))
	tr.Observe(t0.Add(-time.Minute), Outcome{OK: true}) // a lane that delivered before
	for _, s := range steps {
		now := at(s.at)
		switch s.do {
		case "ok", "fail", "gone":
			o := Outcome{OK: s.do == "ok", Gone: s.do == "gone", Reason: "HTTP 500"}
			if got := tr.Observe(now, o); got != s.want {
				t.Fatalf("%s: change %+v, want %+v", s.name, got, s.want)
			}
		case "start":
			ok, wake := tr.Startable(now, s.busy)
			var want time.Time
			if s.wake > 0 {
				want = at(s.wake)
			}
			if ok != s.startable || !wake.Equal(want) {
				t.Fatalf("%s: startable %v wake %v, want %v %v", s.name, ok, wake, s.startable, want)
			}
			if ok {
				tr.Started()
			}
		case "release":
			var want time.Time
			if s.nextProbe > 0 {
				want = at(s.nextProbe)
			}
			if got := tr.Released(now); !got.Equal(want) {
				t.Fatalf("%s: next probe %v, want %v", s.name, got, want)
			}
		case "restart":
			tr.Restart(now)
		case "due":
			after := s.dueAfter
			if after == 0 {
				after = 24 * time.Hour
			}
			if got := tr.DisableDue(now, after, false); got != s.due {
				t.Fatalf("%s: disable due %v, want %v", s.name, got, s.due)
			}
		case "disable-failed":
			tr.DisableFailed()
		}
		if tr.Failing() != s.failing {
			t.Fatalf("%s: failing %v, want %v", s.name, tr.Failing(), s.failing)
		}
		if s.checkStatus && tr.Status().FailuresInRow != s.failures {
			t.Fatalf("%s: failures in row %d, want %d", s.name, tr.Status().FailuresInRow, s.failures)
		}
	}
}

// fails returns n failed attempts, one a second from start, each started and released.
func fails(n int, start time.Duration) []step {
	var out []step
	for i := range n {
		d := start + time.Duration(i)*time.Second
		out = append(out, step{name: "start", at: d, do: "start", startable: true, failing: i > 0},
			step{name: "fail", at: d, do: "fail", failing: true}, step{name: "release", at: d, do: "release", failing: true})
	}
	return out
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	steps := fails(9, 0)
	steps = append(steps,
		step{name: "10th start", at: 9 * time.Second, do: "start", startable: true, failing: true},
		step{name: "10th failure opens", at: 9 * time.Second, do: "fail", want: Change{Opened: true, FirstOpen: true},
			failing: true, checkStatus: true, failures: 10},
		step{name: "release of the attempt that opened it: not a probe", at: 9 * time.Second, do: "release", failing: true},
		step{name: "no probe before a second", at: 9*time.Second + 500*time.Millisecond, do: "start", wake: 10 * time.Second,
			failing: true},
		step{name: "one probe at a time", at: 10 * time.Second, do: "start", busy: 1, failing: true},
		step{name: "the probe", at: 10 * time.Second, do: "start", startable: true, failing: true},
		step{name: "it fails", at: 11 * time.Second, do: "fail", failing: true},
		step{name: "the next waits 2s", at: 11 * time.Second, do: "release", nextProbe: 13 * time.Second, failing: true},
		step{name: "not yet", at: 12 * time.Second, do: "start", wake: 13 * time.Second, failing: true},
		step{name: "second probe", at: 13 * time.Second, do: "start", startable: true, failing: true},
		step{name: "it succeeds: closed and recovered", at: 13 * time.Second, do: "ok",
			want: Change{Closed: true, Recovered: true, FailingSince: t0, Failures: 11}, checkStatus: true},
		step{name: "release after the success", at: 13 * time.Second, do: "release"},
		step{name: "closed: attempts start at once", at: 13 * time.Second, do: "start", busy: 5, startable: true},
	)
	run(t, steps)
}

// A run in which the breaker opened reports its recovery once; a failure that opens it again in
// a later run reports a first open again, and a success of a run without an open breaker is no
// recovery.
func TestRecoveryIsReportedOncePerRun(t *testing.T) {
	steps := fails(3, 0)
	steps = append(steps, step{name: "success after 3 failures", at: 3 * time.Second, do: "ok"})
	steps = append(steps, fails(9, 4*time.Second)...)
	steps = append(steps,
		step{name: "10th", at: 13 * time.Second, do: "fail", want: Change{Opened: true, FirstOpen: true}, failing: true},
		step{name: "release", at: 13 * time.Second, do: "release", failing: true},
		step{name: "success", at: 15 * time.Second, do: "ok", want: Change{Closed: true, Recovered: true, FailingSince: at(4 * time.Second),
			Failures: 10}},
		step{name: "another success", at: 16 * time.Second, do: "ok"})
	run(t, steps)
}

// A lane is due to be disabled once its run lasted the disable-after, once until the disable
// fails; a success ends the run.
func TestDisableIsDueAfterTheRunLasted(t *testing.T) {
	run(t, []step{
		{name: "not failing", at: 48 * time.Hour, do: "due"},
		{name: "first failure", at: time.Hour, do: "fail", failing: true},
		{name: "23h into the run", at: 24 * time.Hour, do: "due", failing: true},
		{name: "24h into the run", at: 25 * time.Hour, do: "due", due: true, failing: true},
		{name: "under way: not again", at: 26 * time.Hour, do: "due", failing: true},
		{name: "the write failed", at: 26 * time.Hour, do: "disable-failed", failing: true},
		{name: "due again", at: 26 * time.Hour, do: "due", due: true, failing: true},
		{name: "a success ends the run", at: 27 * time.Hour, do: "ok"},
		{name: "not due after it", at: 60 * time.Hour, do: "due"},
		{name: "a negative disable-after: never", at: 61 * time.Hour, do: "fail", failing: true},
		{name: "never", at: 500 * time.Hour, do: "due", dueAfter: -1, failing: true},
	})
}

// A 410 is a failure that says the destination is gone; a restart (enabled again) ends the run
// and closes the breaker, and the lane counts as failing until its first success after it.
func TestGoneAndRestart(t *testing.T) {
	steps := fails(9, time.Second)
	steps = append(steps,
		step{name: "410 opens it too", at: 10 * time.Second, do: "gone", want: Change{Opened: true, FirstOpen: true, Gone: true},
			failing: true},
		step{name: "restart", at: 20 * time.Second, do: "restart", failing: true, checkStatus: true, failures: 0},
		step{name: "closed after a restart", at: 20 * time.Second, do: "start", busy: 3, startable: true, failing: true},
		step{name: "no disable due: the run ended", at: 100 * time.Hour, do: "due", failing: true},
		step{name: "first success after the restart", at: 21 * time.Second, do: "ok"},
	)
	run(t, steps)
}

func TestResumeCountsFromTheRecordedStart(t *testing.T) {
	var tr Tracker
	tr.Restart(at(100 * time.Hour))
	tr.Resume(t0)
	if !tr.DisableDue(at(100*time.Hour), 24*time.Hour, false) {
		t.Fatal("a run recorded 100h ago is not due after a restart")
	}
	var paused Tracker
	paused.Resume(t0)
	if paused.DisableDue(at(100*time.Hour), 24*time.Hour, true) {
		t.Fatal("a paused lane is due")
	}
}

func TestProbeDelay(t *testing.T) {
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute, time.Minute} {
		if got := ProbeDelay(n); got != want {
			t.Errorf("probe %d: %v, want %v", n, got, want)
		}
	}
}
