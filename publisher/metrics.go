package publisher

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// Attempt results, the values of the result label of outbox_relay_delivery_attempts_total and
// of Result.Label.
const (
	ResultSuccess = "success"
	Result3xx     = "http_3xx"
	Result4xx     = "http_4xx"
	Result5xx     = "http_5xx"
	ResultTimeout = "timeout"
	ResultNetwork = "network"
	// ResultRejected is a broker destination's answer that refused the message (a JetStream
	// API error such as a full stream, a Kafka error code); it is retried like a 5xx.
	ResultRejected = "rejected"
	// ResultProxy is a failure of the relay's own outbound proxy (an endpoint's egress proxy
	// refused or could not be reached): the attempt is retried and is not the endpoint's failure
	// (Result.Unblamed). It is counted only once it happens.
	ResultProxy = "proxy"
)

// publisherMetrics are the series a Publisher writes; it is their only writer (the parked
// gauge is written by its scheduler). They carry no process-level labels, so a Registerer
// wrapped with a pipeline label gives one set per publisher.
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
			"Events resent after a restart that an earlier process had already delivered (per the status marks), not sent again."),
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
	for _, r := range []string{ResultSuccess, Result3xx, Result4xx, Result5xx, ResultTimeout, ResultNetwork, ResultRejected} {
		m.DeliveryAttempts.WithLabelValues(r)
	}
	return m
}

// markerMetrics are the series a Marker writes; it is their only writer.
type markerMetrics struct {
	MarkerPending prometheus.Gauge
	MarkerErrors  prometheus.Counter
}

func newMarkerMetrics(reg prometheus.Registerer) *markerMetrics {
	return &markerMetrics{
		MarkerPending: metrics.Gauge(reg, "status_marks_pending", "Delivered events whose row is not yet marked done."),
		MarkerErrors: metrics.Counter(reg, "status_mark_errors_total",
			"Failed batches of status marks (retried; advisory only)."),
	}
}
