package main

import (
	"strings"
	"time"
)

// config sizes one run. Everything scales with Events.
type config struct {
	// Events is the main backlog (BENCH_EVENTS). The sweep rows use Events/5 each, the
	// resources row 3×Events.
	Events int
	// Steady is how long each steady-latency row produces. If zero, 10s × Events/100,000,
	// at least 1s.
	Steady time.Duration
	// Durable keeps fsync on; if false, PostgreSQL runs with fsync and full_page_writes off.
	Durable bool
	// Only, if not empty, runs just the rows whose names contain one of these (any case); one
	// that ends in a digit matches a whole number, so "endpoints 10" selects "Endpoints 10"
	// but not "Endpoints 100". The ceiling rows need the drain row.
	Only []string
	// IsolationRate and IsolationDuration are the isolation row's load (BENCH_ISOLATION_RATE,
	// BENCH_ISOLATION_DURATION). Zero: 1,000 events/s for 10m, each of its two runs.
	IsolationRate     int
	IsolationDuration time.Duration
	// IsolationArgs are extra relay flags for the isolation row (BENCH_ISOLATION_ARGS, split on
	// spaces), e.g. "--spill-after 1h --spill-size 1000000000" for the relay without the spill.
	IsolationArgs []string
	// FanoutN and FanoutF are the fan-out rows' endpoint counts and endpoints per event
	// (BENCH_FANOUT_N, BENCH_FANOUT_F). Empty: 1, 1,000 and 10,000; 1 and 10.
	FanoutN, FanoutF []int
	// FanoutRate is the fan-out rows' fixed rate in deliveries/s (BENCH_FANOUT_RATE). Zero: 2,000.
	FanoutRate int
	// OTel makes every relay trace to an OTLP receiver in the bench's process (BENCH_OTEL=1,
	// otel.go). False: no tracing.
	OTel bool
}

func (c config) isolationRate() int {
	if c.IsolationRate > 0 {
		return c.IsolationRate
	}
	return 1000
}

func (c config) isolationDuration() time.Duration {
	if c.IsolationDuration > 0 {
		return c.IsolationDuration
	}
	return 10 * time.Minute
}

func (c config) selected(row string) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, o := range c.Only {
		if o = strings.TrimSpace(o); o != "" && containsPart(strings.ToLower(row), strings.ToLower(o)) {
			return true
		}
	}
	return false
}

// containsPart reports whether part occurs in name, not followed by a digit if it ends in one.
func containsPart(name, part string) bool {
	endsInDigit := isDigit(part[len(part)-1])
	for i := 0; i+len(part) <= len(name); i++ {
		j := strings.Index(name[i:], part)
		if j < 0 {
			return false
		}
		end := i + j + len(part)
		if !endsInDigit || end == len(name) || !isDigit(name[end]) {
			return true
		}
		i += j
	}
	return false
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func (c config) steady() time.Duration {
	if c.Steady > 0 {
		return c.Steady
	}
	return max(time.Duration(float64(10*time.Second)*float64(c.Events)/100_000), time.Second)
}
