package publisher

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// publisherMetrics are the series a pipeline's engine writes; it is their only writer. They
// carry no process-level labels, so a Registerer wrapped with a pipeline label gives one set per
// pipeline. The attempts' series (delivery_attempts_total, delivery_duration_seconds,
// inflight_events) are written by the metrics decorator around each destination (decorate.go).
type publisherMetrics struct {
	EventsDelivered    prometheus.Counter
	EventsDeadLettered prometheus.Counter
	EventsSkipped      prometheus.Counter
	EventsAbandoned    prometheus.Counter
	EventsSpilled      prometheus.Counter
	DeliveryAttempts   *prometheus.CounterVec
	DeliveryDuration   prometheus.Histogram
	EndToEnd           prometheus.Histogram
	Inflight           prometheus.Gauge
	Paused             prometheus.Gauge
	ReplayPending      prometheus.Gauge
	ParkedAggregates   prometheus.Gauge
}

func newPublisherMetrics(reg prometheus.Registerer) *publisherMetrics {
	m := &publisherMetrics{
		EventsDelivered: metrics.Counter(reg, "events_delivered_total", "Events delivered (answered 2xx)."),
		EventsDeadLettered: metrics.Counter(reg, "events_dead_lettered_total",
			"Events dead-lettered after the last allowed attempt."),
		EventsSkipped: metrics.Counter(reg, "events_skipped_total",
			"Events resent after a restart or takeover that an earlier process had already delivered to every endpoint they route to (per the status marks and the delivery log), and backlog entries it had delivered: not sent again."),
		EventsAbandoned: metrics.Counter(reg, "events_abandoned_total",
			"Events a shadow pipeline gave up on after its last attempt (recorded, settled, never parked)."),
		EventsSpilled: metrics.Counter(reg, "events_spilled_total",
			"Events an endpoint spilled to its backlog off the WAL (it lagged by its spill_after), to be delivered from there."),
		DeliveryAttempts: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "delivery_attempts_total",
			Help: "Delivery attempts by result: success, http_3xx, http_4xx, http_5xx, timeout, network, rejected (a broker refused the message), or proxy (the relay's egress proxy failed)."}, []string{"result"})),
		DeliveryDuration: metrics.Histogram(reg, "delivery_duration_seconds", "Duration of one delivery attempt.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		EndToEnd: metrics.Histogram(reg, "end_to_end_seconds", "From commit timestamp to successful delivery.",
			prometheus.ExponentialBuckets(0.0005, 2, 22)),
		Inflight: metrics.Gauge(reg, "inflight_events", "Deliveries in flight (requests under way)."),
		Paused: metrics.Gauge(reg, "pipeline_paused",
			"1 while the pipeline is paused (`outbox-relay pause`, or a 410 Gone answer): nothing is sent and the slot keeps its position."),
		ReplayPending: metrics.Gauge(reg, "replay_pending_events",
			"Events a replay of a time range (`outbox-relay replay` since a time) has still to re-send; 0 when none runs."),
		ParkedAggregates: metrics.Gauge(reg, "parked_aggregates",
			"Aggregates parked behind a dead-lettered event, waiting for a replay."),
	}
	for _, r := range destination.Results {
		m.DeliveryAttempts.WithLabelValues(r)
	}
	return m
}

// The transitions counted.
const (
	transitionOpened    = "circuit_opened"
	transitionRecovered = "recovered"
	transitionDisabled  = "disabled"
)

// transitionMetrics count the endpoints' transitions.
type transitionMetrics struct {
	opened, recovered, disabled prometheus.Counter
}

func newTransitionMetrics(reg prometheus.Registerer) *transitionMetrics {
	vec := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoint_transitions_total",
		Help: "Endpoint transitions: circuit_opened (10 failed attempts in a row), recovered (a success after the breaker opened), " +
			"disabled (automatically: failing for endpoint_disable_after, or 410 Gone).",
	}, []string{"transition"}))
	return &transitionMetrics{vec.WithLabelValues(transitionOpened), vec.WithLabelValues(transitionRecovered),
		vec.WithLabelValues(transitionDisabled)}
}

// endpointMetrics is the collector of the endpoint series. Whatever the number of endpoints, it
// exports a fixed set of aggregate series and per-endpoint series for at most MetricsMax
// endpoints in trouble (most failures in a row first, then most undelivered) plus those named in
// MetricsEndpoints: 1,000 endpoints do not make 1,000 times the series. It reads the engine
// through snapshot, which its owner takes under its lock.
type endpointMetrics struct {
	snapshot                           func() endpointSnapshot
	max                                int
	endpoints, failing, open           *prometheus.Desc
	spilling, backlogEvents            *prometheus.Desc
	undelivered, oldest, failuresInRow *prometheus.Desc
	backlog                            *prometheus.Desc
	named                              map[string]bool
}

// endpointSnapshot is what the collector reports, taken at once.
type endpointSnapshot struct {
	states                                 map[string]float64
	failing, open, spilling, backlogEvents float64
	samples                                []endpointSample
	now                                    time.Time
}

type endpointSample struct {
	id                               string
	failures, undelivered, inBacklog int64
	oldest                           time.Time
}

func newEndpointMetrics(reg prometheus.Registerer, named []string, max int, snapshot func() endpointSnapshot) {
	name := func(n string) string { return metrics.Namespace + "_" + n }
	em := &endpointMetrics{snapshot: snapshot, max: max, named: map[string]bool{},
		endpoints: prometheus.NewDesc(name("endpoints"), "Endpoints by state (enabled, paused, disabled).", []string{"state"}, nil),
		failing: prometheus.NewDesc(name("endpoints_failing"),
			"Endpoints whose last attempt failed.", nil, nil),
		open: prometheus.NewDesc(name("endpoints_circuit_open"),
			"Endpoints whose circuit breaker is open (they failed 10 attempts in a row): probed one attempt at a time until one succeeds.",
			nil, nil),
		spilling: prometheus.NewDesc(name("endpoints_spilling"),
			"Endpoints with a backlog off the WAL: they spill to it (they lagged by their spill_after, or are disabled with events kept), "+
				"or have events in it still to deliver.",
			nil, nil),
		backlogEvents: prometheus.NewDesc(name("endpoint_backlog_events"),
			"Events in the endpoints' backlogs, all endpoints together.", nil, nil),
		backlog: prometheus.NewDesc(name("endpoint_backlog"),
			"Events in the endpoint's backlog off the WAL; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		undelivered: prometheus.NewDesc(name("endpoint_undelivered"),
			"Events the endpoint is owed: held for it (queued, in flight, waiting for a retry, paused) and in its backlog off the WAL; "+
				"only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		oldest: prometheus.NewDesc(name("endpoint_oldest_undelivered_seconds"),
			"Age of the oldest event the endpoint is owed, its backlog included; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
		failuresInRow: prometheus.NewDesc(name("endpoint_failures_in_row"),
			"Failed attempts since the endpoint's last success; only for the endpoints in trouble and those asked for.",
			[]string{"endpoint"}, nil),
	}
	for _, id := range named {
		em.named[id] = true
	}
	if reg != nil {
		metrics.Register(reg, prometheus.Collector(em))
	}
}

// endpointSnapshot takes what the endpoint series report (called under the owner's lock).
func (e *engine) endpointSnapshot(named map[string]bool) endpointSnapshot {
	s := endpointSnapshot{states: map[string]float64{endpoint.Enabled: 0, endpoint.Paused: 0, endpoint.Disabled: 0}, now: e.now}
	for _, l := range e.lanes {
		h := l.health.Status()
		state := l.row.State
		if state == "" {
			state = endpoint.Enabled
		}
		s.states[state]++
		if h.FailuresInRow > 0 {
			s.failing++
		}
		if l.health.Open() && l.active {
			s.open++
		}
		inBacklog := l.bl.entries + int64(len(l.bl.buf)+len(l.bl.writing))
		s.backlogEvents += float64(inBacklog)
		if l.hasBacklog() {
			s.spilling++
		}
		if h.FailuresInRow == 0 && state != endpoint.Paused && !l.hasBacklog() && !named[l.id] {
			continue
		}
		sm := endpointSample{id: l.id, failures: int64(h.FailuresInRow), inBacklog: inBacklog}
		n, oldest := l.undelivered()
		sm.undelivered, sm.oldest = int64(n), oldest
		s.samples = append(s.samples, sm)
	}
	return s
}

// Describe implements prometheus.Collector.
func (em *endpointMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{em.endpoints, em.failing, em.open, em.spilling, em.backlogEvents, em.undelivered,
		em.oldest, em.failuresInRow, em.backlog} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (em *endpointMetrics) Collect(ch chan<- prometheus.Metric) {
	s := em.snapshot()
	for state, n := range s.states {
		ch <- prometheus.MustNewConstMetric(em.endpoints, prometheus.GaugeValue, n, state)
	}
	ch <- prometheus.MustNewConstMetric(em.failing, prometheus.GaugeValue, s.failing)
	ch <- prometheus.MustNewConstMetric(em.open, prometheus.GaugeValue, s.open)
	ch <- prometheus.MustNewConstMetric(em.spilling, prometheus.GaugeValue, s.spilling)
	ch <- prometheus.MustNewConstMetric(em.backlogEvents, prometheus.GaugeValue, s.backlogEvents)
	slices.SortFunc(s.samples, func(a, b endpointSample) int {
		switch {
		case a.failures != b.failures:
			return int(b.failures - a.failures)
		case a.undelivered != b.undelivered: // (its backlog included)
			return int(b.undelivered - a.undelivered)
		}
		return cmpString(a.id, b.id)
	})
	shown := 0
	for _, sm := range s.samples {
		if !em.named[sm.id] {
			if shown >= em.max {
				continue
			}
			shown++
		}
		age := 0.0
		if !sm.oldest.IsZero() {
			age = s.now.Sub(sm.oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(em.undelivered, prometheus.GaugeValue, float64(sm.undelivered), sm.id)
		ch <- prometheus.MustNewConstMetric(em.oldest, prometheus.GaugeValue, age, sm.id)
		ch <- prometheus.MustNewConstMetric(em.failuresInRow, prometheus.GaugeValue, float64(sm.failures), sm.id)
		ch <- prometheus.MustNewConstMetric(em.backlog, prometheus.GaugeValue, float64(sm.inBacklog), sm.id)
	}
}
