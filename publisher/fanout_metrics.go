package publisher

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/store"
)

// endpointMetrics is the collector of a Fanout's endpoint series. Whatever the number of
// endpoints, it exports a fixed set of aggregate series and per-endpoint series for at most
// MetricsMax endpoints in trouble (most failures in a row first, then most undelivered) plus
// those named in MetricsEndpoints: 1,000 endpoints do not make 1,000 times the series.
type endpointMetrics struct {
	f                                  *Fanout
	endpoints, failing, open           *prometheus.Desc
	spilling, backlogEvents            *prometheus.Desc
	undelivered, oldest, failuresInRow *prometheus.Desc
	backlog                            *prometheus.Desc
	named                              map[string]bool
}

func newEndpointMetrics(f *Fanout, reg prometheus.Registerer) *endpointMetrics {
	name := func(n string) string { return metrics.Namespace + "_" + n }
	em := &endpointMetrics{f: f, named: map[string]bool{},
		endpoints: prometheus.NewDesc(name("endpoints"), "Endpoints by state (enabled, paused, disabled).", []string{"state"}, nil),
		failing: prometheus.NewDesc(name("endpoints_failing"),
			"Endpoints whose last attempt failed.", nil, nil),
		open: prometheus.NewDesc(name("endpoints_circuit_open"),
			"Endpoints whose circuit breaker is open (they failed 10 attempts in a row): probed one attempt at a time until one succeeds.",
			nil, nil),
		spilling: prometheus.NewDesc(name("endpoints_spilling"),
			"Endpoints that spill to their backlog off the WAL (they lagged by their spill_after, or are disabled with events kept).",
			nil, nil),
		backlogEvents: prometheus.NewDesc(name("endpoint_backlog_events"),
			"Events in the endpoints' backlogs, all endpoints together.", nil, nil),
		backlog: prometheus.NewDesc(name("endpoint_backlog"),
			"Events in the endpoint's backlog off the WAL; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		undelivered: prometheus.NewDesc(name("endpoint_undelivered"),
			"Events held for the endpoint (queued, in flight, waiting for a retry); only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		oldest: prometheus.NewDesc(name("endpoint_oldest_undelivered_seconds"),
			"Age of the oldest event held for the endpoint; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		failuresInRow: prometheus.NewDesc(name("endpoint_failures_in_row"),
			"Failed attempts since the endpoint's last success; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
	}
	for _, id := range f.cfg.MetricsEndpoints {
		em.named[id] = true
	}
	if reg != nil {
		metrics.Register(reg, prometheus.Collector(em))
	}
	return em
}

// Describe implements prometheus.Collector.
func (em *endpointMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{em.endpoints, em.failing, em.open, em.spilling, em.backlogEvents, em.undelivered,
		em.oldest, em.failuresInRow, em.backlog} {
		ch <- d
	}
}

type endpointSample struct {
	id       string
	st       store.EndpointStatus
	troubled bool
}

// Collect implements prometheus.Collector.
func (em *endpointMetrics) Collect(ch chan<- prometheus.Metric) {
	states := map[string]float64{endpoint.Enabled: 0, endpoint.Paused: 0, endpoint.Disabled: 0}
	failing, open, spilling, backlogEvents := 0.0, 0.0, 0.0, 0.0
	var samples []endpointSample
	now := time.Now()
	em.f.mu.RLock()
	for id, l := range em.f.lanes {
		l.mu.Lock()
		state, fails, lastErr := l.state, l.st.failures, l.st.lastErrorAt
		l.mu.Unlock()
		states[state]++
		if fails > 0 {
			failing++
		}
		inBacklog, spills := l.backlogState()
		backlogEvents += float64(inBacklog)
		if spills {
			spilling++
		}
		troubled := fails > 0 || state == endpoint.Paused || spills
		if !troubled && !em.named[id] {
			continue
		}
		st := store.EndpointStatus{ID: id, FailuresInRow: fails, LastErrorAt: lastErr, Backlog: inBacklog}
		if p := l.cur.Load(); p != nil {
			if p.sched.breakerOpen() {
				open++
			}
			n, oldest := p.sched.undelivered()
			st.Undelivered, st.OldestUndelivered = int64(n), oldest
		}
		samples = append(samples, endpointSample{id: id, st: st, troubled: troubled})
	}
	em.f.mu.RUnlock()
	for s, n := range states {
		ch <- prometheus.MustNewConstMetric(em.endpoints, prometheus.GaugeValue, n, s)
	}
	ch <- prometheus.MustNewConstMetric(em.failing, prometheus.GaugeValue, failing)
	ch <- prometheus.MustNewConstMetric(em.open, prometheus.GaugeValue, open)
	ch <- prometheus.MustNewConstMetric(em.spilling, prometheus.GaugeValue, spilling)
	ch <- prometheus.MustNewConstMetric(em.backlogEvents, prometheus.GaugeValue, backlogEvents)
	slices.SortFunc(samples, func(a, b endpointSample) int {
		if a.st.FailuresInRow != b.st.FailuresInRow {
			return b.st.FailuresInRow - a.st.FailuresInRow
		}
		if a.st.Undelivered+a.st.Backlog != b.st.Undelivered+b.st.Backlog {
			return int(b.st.Undelivered + b.st.Backlog - a.st.Undelivered - a.st.Backlog)
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	shown := 0
	for _, s := range samples {
		if !em.named[s.id] {
			if shown >= em.f.cfg.MetricsMax {
				continue
			}
			shown++
		}
		age := 0.0
		if !s.st.OldestUndelivered.IsZero() {
			age = now.Sub(s.st.OldestUndelivered).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(em.undelivered, prometheus.GaugeValue, float64(s.st.Undelivered), s.id)
		ch <- prometheus.MustNewConstMetric(em.oldest, prometheus.GaugeValue, age, s.id)
		ch <- prometheus.MustNewConstMetric(em.failuresInRow, prometheus.GaugeValue, float64(s.st.FailuresInRow), s.id)
		ch <- prometheus.MustNewConstMetric(em.backlog, prometheus.GaugeValue, float64(s.st.Backlog), s.id)
	}
}
