// Package relay runs a whole relay from a Config: it is `outbox-relay run` as a library, for a
// program that wants the relay inside its own process (its own logger, metrics registry, HTTP
// mux, destination and lifetime) instead of the binary.
//
// A relay wires the packages of the data path: cdc.Stream reads committed outbox rows from the
// slot, the publisher delivers them to a destination (the webhook of destination/webhook, or any
// destination.Opener: destination/natsdest, destination/kafkadest or a program's own through
// destination.Opened), and their acknowledgements flow back to the stream's Tracker, which
// decides what the slot may confirm. Run owns every goroutine it starts and waits for all of
// them before it returns.
//
// # Configuration
//
// New checks a Config before anything connects and returns an error naming the field and the
// fix (ErrConfig). A Config takes one of two forms: the flat fields of the default pipeline
// (WebhookURL, Secrets, Slot, RetryMin, ..., what `outbox-relay run` builds from its flags),
// or Pipelines, several pipelines from one outbox, each with its own slot, destination and
// filter, as `--config` does. Zero values mean the CLI's defaults, which
// docs/reference/configuration.md lists with each setting's flag, environment variable and
// YAML key. Shards and Shard split one pipeline over several processes.
//
// # Start, standby and stop
//
// At start Run checks the server and the schema and returns an error that names the fix when
// something is wrong (wal_level, a missing table or privilege, an invalidated slot), creates
// the publication and the slot if they are missing (never dropping either) and, when it
// created the slot, first delivers the rows already pending (the backfill). If another
// process streams the slot, the relay stands by and takes over when it goes away. Cancelling
// ctx stops reading, lets in-flight deliveries finish for up to ShutdownTimeout, confirms what
// was delivered and returns nil. The function Run is New followed by (*Relay).Run.
//
// # Metrics and health
//
// Handler serves /metrics (from Gatherer), /healthz and /readyz, for the program's own mux;
// MetricsAddr makes the relay serve it itself, as the CLI does. Series are registered on
// Registerer (a new registry if nil). RegisterMetrics registers the same series without
// connecting anywhere, for a dashboard or a test that wants to know them.
//
// # Traces
//
// With a TracerProvider (OpenTelemetry's API; the program sets up and shuts down its own SDK)
// the relay records a span for each transaction it decodes and one for each delivery attempt,
// a child of the trace context the event's producer stored, and each attempt's request carries
// its own span's traceparent (docs/operations/tracing.md). Without one nothing is traced and
// no tracing code runs on the delivery path; the relay links OpenTelemetry's API only.
package relay
