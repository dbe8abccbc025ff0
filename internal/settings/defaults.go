// Package settings is the one table of the relay's settings: every flag of `outbox-relay run`
// with its environment variable, its key in a pipelines file (--config), its default and what
// it means. The flags take their defaults and help from it, the pipelines file and the Go
// configs (relay, publisher, the destinations) their defaults from its constants, and the
// configuration reference (docs/reference/configuration.md) and the run table of docs/reference/commands.md are
// generated from it (cmd/outbox-relay: go test -run TestConfigurationReference -update).
//
// A new setting lands here: a constant for its default (if it has one), a row in Run, then the
// flag (cmd/outbox-relay), the YAML key (internal/pipeconf) and the Go field that use them.
package settings

import "time"

// Defaults, each used by the flag, the YAML key and the Go config field of the same setting.
const (
	Slot               = "outbox_relay"
	Publication        = "outbox_relay"
	MetricsAddr        = ":9187"
	RetryMin           = time.Second
	RetryMax           = 10 * time.Minute
	RequestTimeout     = 10 * time.Second
	MaxAttempts        = 0 // about a day of retries at RetryMax (AttemptsForADay)
	ShadowMaxAttempts  = 5 // a shadow pipeline's MaxAttempts when it is 0
	MaxInFlight        = 64
	MaxBufferedEvents  = 8192
	MaxBufferedBytes   = 32 << 20
	ShutdownTimeout    = 10 * time.Second
	StallTimeout       = 3 * time.Minute
	PollInterval       = 15 * time.Second // the database-only gauges; not a flag
	BatchMaxEvents     = 1
	BatchMaxBytes      = 1 << 20
	BatchLinger        = 5 * time.Millisecond
	SignatureScheme    = "x-signature"
	Format             = "raw"
	Compression        = "none"
	Marks              = "done"
	OnGone             = "pause"
	Failover           = "auto"
	LogLevel           = "info"
	LogFormat          = "auto"
	Shard              = -1 // every shard
	NATSSubject        = "outbox.{aggregate_type}.{event_type}"
	NATSStreamReplicas = 1
	KafkaTopic         = "outbox.event.{aggregate_type}"
	KafkaCompression   = "none"
	// PortalSessionTTL is how long a session of the partner portal or the operator console
	// lasts from its sign-in (issue 36): a working day.
	PortalSessionTTL = 8 * time.Hour
	// A pipeline with endpoints (issue 24): the workers its endpoints share, an endpoint's
	// in-flight cap when its row sets none, and how many troubled endpoints get series of their
	// own.
	EndpointWorkers     = 256
	EndpointMaxInFlight = 16
	EndpointMetricsMax  = 20
	// EndpointSpillAfter is how long an endpoint's oldest undelivered event waits before the
	// endpoint spills to its backlog; EndpointSpillSize is how many events it holds, delivering
	// none, before it spills.
	EndpointSpillAfter = 30 * time.Second
	EndpointSpillSize  = 1000
	// EndpointDisableAfter is how long an endpoint fails without a success before it is
	// disabled automatically: five days.
	EndpointDisableAfter = 120 * time.Hour
	// DeliveryLogRetention is how long the endpoints' delivery log is kept.
	DeliveryLogRetention = 7 * 24 * time.Hour
)

// AttemptsForADay is the number of attempts whose backoff delays, doubling from lo up to hi,
// add up to about 24 hours: what MaxAttempts 0 means. A zero lo or hi is RetryMin or RetryMax.
func AttemptsForADay(lo, hi time.Duration) int {
	if lo <= 0 {
		lo = RetryMin
	}
	if hi <= 0 {
		hi = RetryMax
	}
	total, n := time.Duration(0), 1
	for d := lo; total < 24*time.Hour; n++ {
		total += min(d, hi)
		d = min(d*2, hi)
	}
	return n
}
