// Package relay runs a whole relay from a Config: it is `outbox-relay run` as a library, for a
// program that wants the relay inside its own process (its own logger, its own metrics
// registry, its own lifetime) instead of the binary.
//
// Run wires the packages of the data path: cdc.Stream reads committed outbox rows from the
// slot, the publisher delivers them to a destination (publisher/webhook, publisher/natsdest or
// publisher/kafkadest), and their acknowledgements flow back to the stream's Tracker, which
// decides what the slot may confirm. Run owns every goroutine it starts and waits for all of
// them before it returns.
//
// # Configuration
//
// A Config with DSN, WebhookURL and Secrets is a complete relay: the zero value of every other
// field selects the relay's default (docs/reference/configuration.md lists each with its
// flag of `outbox-relay run`). Destination selects a broker instead of the
// webhook; Pipelines runs several pipelines from one outbox, each with its own slot,
// destination and filter, as `--config` does; Shards and Shard split one pipeline over
// several processes.
//
// # Start, standby and stop
//
// At start Run checks the server and the schema and returns an error that names the fix when
// something is wrong (wal_level, a missing table or privilege, an invalidated slot), creates
// the publication and the slot if they are missing (never dropping either) and, when it
// created the slot, first delivers the rows already pending (the backfill). If another
// process streams the slot, Run stands by and takes over when it goes away. Cancelling ctx
// stops reading, lets in-flight deliveries finish for up to ShutdownTimeout, confirms what was
// delivered and returns nil.
//
// # Metrics and health
//
// With MetricsAddr set, Run serves /metrics from Registry (a new registry if nil), /healthz
// and /readyz. RegisterMetrics registers the same series without connecting anywhere, for a
// dashboard or a test that wants to know them.
package relay
