// Package cdc turns a PostgreSQL logical replication slot into committed outbox rows, and
// confirms the slot's position back to the server only once those rows are delivered.
//
// # Slot and publication
//
// A publication names the tables whose changes are decoded; the relay's publication carries
// only INSERTs on outbox_events of the relay's schema (CREATE PUBLICATION ... FOR TABLE
// "app"."outbox_events" WITH (publish = 'insert'); Config.Schema and SetupOptions.Schema name
// the schema, else the connection's current_schema()). The decoder takes rows of that one
// table: a table of the same name in another schema yields nothing, even if a publication
// carries it. A logical replication slot, decoded with the built-in pgoutput plugin, is the
// server's durable cursor into the WAL: it keeps every WAL segment the relay has not confirmed,
// and after a restart streaming resumes from its confirmed position. Stream creates both if they
// are missing and never drops either.
//
// # Transactions, events and control records
//
// Each committed transaction reaches the publisher as one Tx. Its outbox rows are its Events,
// each an envelope.Message: the message every destination receives, whose Sequence
// (X-Event-Sequence) and CommitTime the decoder sets once, at the commit. An operator's request
// written into the same WAL (a replay request is a transactional logical decoding message) is
// a Control beside them, with its place among the rows, so that it takes effect in commit
// order and is never part of what a destination sees. A change of outbox_endpoints travels the
// same way: migration 14's trigger writes each INSERT, UPDATE, DELETE and TRUNCATE of the table
// as a message (EndpointPrefix), which reaches every slot of the database whatever its
// publication carries, and becomes a Control whose Endpoint says what changed; a relay with
// endpoints routes each transaction by the endpoints as of its commit. Control records are
// settled like events (Tracker.AckControl), so a transaction is not confirmed before its
// requests are carried out.
//
// With Config.Tracer set, the stream reports each transaction it hands on, from its BEGIN to
// its COMMIT, to that TxTracer (the relay's records an OpenTelemetry span), and gives each of
// its events the traceparent the tracer returns as envelope.Message.DecodeSpan, to which the
// spans of the delivery attempts link. Without it nothing is recorded.
//
// # What is confirmed, and when
//
// Rows arrive grouped by transaction, in commit order, and only after commit: a rolled-back
// transaction never reaches the stream. Each transaction is registered with a Tracker before it
// is handed on. The publisher acknowledges every event it delivers; when every event of a
// transaction, and of every earlier transaction, is acknowledged, the transaction's end LSN
// (CommitMessage.TransactionEndLSN) becomes confirmable. Stream sends that LSN as the flush
// position of a standby status update within about 100 ms, on the server's request, and at
// least every StatusInterval. When nothing is outstanding and no transaction is open, it also
// confirms the position of the server's last keepalive, so a quiet outbox does not make the
// server keep the WAL that other tables write.
//
// A crash therefore loses nothing: the server resends every transaction after the confirmed
// position, and at-least-once delivery follows. Within one process, transactions that end at or
// before what it already received are skipped after a reconnect, since a crash restart of the
// server can move a slot back.
//
// # Where the slot lives, and moving it
//
// The slot lives on the primary, or, with SetupOptions.ReplicationDSN, on a hot standby
// (PostgreSQL 16+) that decodes it; the publication, the backfill and every record stay on the
// primary, and outbox_slot_location there says which server holds the slot. A slot created on
// a standby backfills from the standby's snapshot: the rows pending in it are exactly those the
// slot will not carry, and the standby's rows are the primary's.
//
// When the slot still lives on the other server than the one configured, Setup moves it (Move):
// it creates the new slot, whose start is the fence, and the stream drains the old slot until it
// has confirmed the fence, then drops it and streams the new one. Both slots decode the same
// WAL, so a position means the same on both: everything up to the fence came from the old slot,
// everything after from the new, and the tracker carries on across the switch as across a
// reconnect.
//
// # Liveness
//
// One goroutine owns the replication connection (pgconn is not safe for concurrent use). It
// never blocks on the publisher: when the tracker's buffer is full (by events or bytes) it stops
// reading WAL but keeps sending status updates, well inside wal_sender_timeout.
//
// The other way round, a connection that went silent (a partition or a frozen middlebox sends
// no FIN and no RST) is found by Config.ReplicationTimeout: while the stream reads, a quarter of
// it without a message sends a status update that requests a reply, which a live walsender
// answers at once, and the whole of it without one ends the session with ErrReplicationTimeout;
// the socket is closed without waiting on it and the stream reconnects.
package cdc
