package cdc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// streamMetrics are the series a Stream writes; it is their only writer. They carry no
// process-level labels, so a Registerer wrapped with a pipeline label gives one set per stream.
type streamMetrics struct {
	LagBytes       prometheus.Gauge
	EventsReceived prometheus.Counter
	TxSkipped      prometheus.Counter
	ConfirmedLSN   prometheus.Gauge
	ServerWALEnd   prometheus.Gauge
	Streaming      prometheus.Gauge
	Reconnects     prometheus.Counter
	StatusUpdates  prometheus.Counter
	ReadPaused     prometheus.Gauge
}

func newStreamMetrics(reg prometheus.Registerer) *streamMetrics {
	return &streamMetrics{
		LagBytes: metrics.Gauge(reg, "replication_lag_bytes",
			"Server WAL end minus the slot position this relay confirmed, in bytes."),
		EventsReceived: metrics.Counter(reg, "events_received_total", "Events read from the replication stream."),
		TxSkipped: metrics.Counter(reg, "transactions_skipped_total",
			"Transactions resent by the server after a reconnect that this process had already received, and skipped."),
		ConfirmedLSN: metrics.Gauge(reg, "confirmed_lsn", "The LSN last confirmed to the server (as a number)."),
		ServerWALEnd: metrics.Gauge(reg, "server_wal_end_lsn",
			"The server's WAL end from its last keepalive (as a number)."),
		Streaming: metrics.Gauge(reg, "streaming",
			"1 while this instance holds the slot and streams; 0 when standing by or reconnecting."),
		Reconnects:    metrics.Counter(reg, "reconnects_total", "Replication connections lost and retried."),
		StatusUpdates: metrics.Counter(reg, "status_updates_total", "Standby status updates sent to the server."),
		ReadPaused:    metrics.Gauge(reg, "read_paused", "1 while reading WAL is paused because the buffer is full."),
	}
}
