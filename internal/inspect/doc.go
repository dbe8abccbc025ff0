// Package inspect reads the relay's state from PostgreSQL alone: the replication slot, the
// outbox rows by status and the parked aggregates. It needs no running relay, so it serves both
// `outbox-relay status` (a one-off report and health probe) and the Poller that keeps the
// polled Prometheus gauges fresh inside `outbox-relay run`.
//
// # What the slot says
//
// The slot is the source of truth for delivery: confirmed_flush_lsn is the position up to which
// every committed outbox row was delivered, and the server keeps WAL from restart_lsn on. Lag in
// bytes is the current WAL position minus confirmed_flush_lsn; retained WAL is the current
// position minus restart_lsn. A slot is healthy when it exists in this database, is a pgoutput
// slot, has not been invalidated (wal_status 'lost'), and some process is streaming from it
// (active).
//
// # What the table says
//
// Row statuses are advisory: the relay marks delivered rows 'done' in batches about 200 ms
// after delivery, and a crash can lose a batch of marks, leaving a delivered row 'pending'. So
// the age of the oldest 'pending' row is an upper bound on how long the oldest undelivered
// event has waited, measured from its transaction's start (created_at), not from its commit.
//
// # Cost
//
// Status counts every row (a full scan on a big table), which is fine for a command run by
// hand. The Poller runs every few seconds, so it counts only the non-done statuses, through the
// (status, available_at) index, and estimates 'done' from the table's live-tuple statistic.
package inspect
