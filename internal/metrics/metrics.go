// Package metrics defines every Prometheus series the relay exports, registered on a registry
// the caller passes in (never the global one). The README's Metrics table documents each.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

const ns = "outbox_relay"

// Attempt results, the values of the result label on DeliveryAttempts.
const (
	ResultSuccess = "success"
	Result3xx     = "http_3xx"
	Result4xx     = "http_4xx"
	Result5xx     = "http_5xx"
	ResultTimeout = "timeout"
	ResultNetwork = "network"
)

// Metrics holds the relay's series. A nil *Metrics is valid in packages' Configs: use New with a
// fresh registry in tests instead of sharing one.
type Metrics struct {
	LagBytes           prometheus.Gauge
	OldestUndelivered  prometheus.Gauge
	EventsReceived     prometheus.Counter
	EventsDelivered    prometheus.Counter
	EventsDeadLettered prometheus.Counter
	TxSkipped          prometheus.Counter
	EventsSkipped      prometheus.Counter
	DeliveryAttempts   *prometheus.CounterVec
	DeliveryDuration   prometheus.Histogram
	EndToEnd           prometheus.Histogram
	Inflight           prometheus.Gauge
	BufferedEvents     prometheus.Gauge
	BufferedBytes      prometheus.Gauge
	ConfirmedLSN       prometheus.Gauge
	ServerWALEnd       prometheus.Gauge
	Streaming          prometheus.Gauge
	Reconnects         prometheus.Counter
	StatusUpdates      prometheus.Counter
	ReadPaused         prometheus.Gauge
	MarkerPending      prometheus.Gauge
	MarkerErrors       prometheus.Counter
	ParkedAggregates   prometheus.Gauge
	SlotRetainedWAL    prometheus.Gauge
	SlotActive         prometheus.Gauge
	OutboxRows         *prometheus.GaugeVec
	BuildInfo          *prometheus.GaugeVec
}

// New creates the series and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		LagBytes: gauge("replication_lag_bytes", "Server WAL end minus the slot position this relay confirmed, in bytes."),
		OldestUndelivered: gauge("oldest_undelivered_seconds",
			"Age (from commit) of the oldest event received but not yet delivered; 0 when none waits."),
		EventsReceived:     counter("events_received_total", "Events read from the replication stream."),
		EventsDelivered:    counter("events_delivered_total", "Events delivered (answered 2xx)."),
		EventsDeadLettered: counter("events_dead_lettered_total", "Events dead-lettered after the last allowed attempt."),
		TxSkipped: counter("transactions_skipped_total",
			"Transactions resent by the server after a reconnect that this process had already received, and skipped."),
		EventsSkipped: counter("events_skipped_total",
			"Events resent after a restart that an earlier process had already delivered (per the status marks), not sent again."),
		DeliveryAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "delivery_attempts_total",
			Help: "Delivery attempts by result: success, http_3xx, http_4xx, http_5xx, timeout or network."}, []string{"result"}),
		DeliveryDuration: histogram("delivery_duration_seconds", "Duration of one delivery attempt.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		EndToEnd: histogram("end_to_end_seconds", "From commit timestamp to successful delivery.",
			prometheus.ExponentialBuckets(0.0005, 2, 22)),
		Inflight:         gauge("inflight_events", "Deliveries in flight (requests under way)."),
		BufferedEvents:   gauge("buffered_events", "Events received and not yet delivered."),
		BufferedBytes:    gauge("buffered_bytes", "Approximate bytes of events received and not yet delivered."),
		ConfirmedLSN:     gauge("confirmed_lsn", "The LSN last confirmed to the server (as a number)."),
		ServerWALEnd:     gauge("server_wal_end_lsn", "The server's WAL end from its last keepalive (as a number)."),
		Streaming:        gauge("streaming", "1 while this instance holds the slot and streams; 0 when standing by or reconnecting."),
		Reconnects:       counter("reconnects_total", "Replication connections lost and retried."),
		StatusUpdates:    counter("status_updates_total", "Standby status updates sent to the server."),
		ReadPaused:       gauge("read_paused", "1 while reading WAL is paused because the buffer is full."),
		MarkerPending:    gauge("status_marks_pending", "Delivered events whose row is not yet marked done."),
		MarkerErrors:     counter("status_mark_errors_total", "Failed batches of status marks (retried; advisory only)."),
		ParkedAggregates: gauge("parked_aggregates", "Aggregates parked behind a dead-lettered event, waiting for a replay."),
		SlotRetainedWAL: gauge("slot_retained_wal_bytes",
			"WAL the server keeps for the slot (current WAL position minus restart_lsn), polled."),
		SlotActive: gauge("slot_active", "1 when the slot is in use by some process (any instance), polled."),
		OutboxRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "outbox_rows",
			Help: "outbox_events rows by status (estimated cheaply), polled."}, []string{"status"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "build_info",
			Help: "Always 1; labels carry the version, commit and Go version."}, []string{"version", "commit", "goversion"}),
	}
	for _, r := range []string{ResultSuccess, Result3xx, Result4xx, Result5xx, ResultTimeout, ResultNetwork} {
		m.DeliveryAttempts.WithLabelValues(r)
	}
	reg.MustRegister(m.LagBytes, m.OldestUndelivered, m.EventsReceived, m.EventsDelivered, m.EventsDeadLettered,
		m.TxSkipped, m.EventsSkipped, m.DeliveryAttempts, m.DeliveryDuration, m.EndToEnd, m.Inflight, m.BufferedEvents,
		m.BufferedBytes, m.ConfirmedLSN, m.ServerWALEnd, m.Streaming, m.Reconnects, m.StatusUpdates,
		m.ReadPaused, m.MarkerPending, m.MarkerErrors, m.ParkedAggregates, m.SlotRetainedWAL, m.SlotActive,
		m.OutboxRows, m.BuildInfo)
	return m
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets})
}

// Discard returns metrics registered nowhere, for components built without a registry.
func Discard() *Metrics { return New(prometheus.NewRegistry()) }
