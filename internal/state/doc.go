// Package state is the SQL of the relay's own state in PostgreSQL: the rows the relay writes
// about itself, apart from the outbox rows a producer writes (outbox) and the consumer's inbox
// (inbox). Its queries name the tables through internal/schema (schema.SQL placeholders), in
// the schema of the relay's tables, so a table of the same name elsewhere is never touched.
//
// # What is here
//
//   - where a slot lives and its move between the primary and a standby
//     (outbox_slot_location: ReadLocation, SetLocation, StartMove, MarkReached, FinishMove),
//     which cdc's placement and move read and write;
//   - a slot's record (outbox_slots: RecordSlot when cdc creates it, PublicationReplaced at
//     every start, ForgetSlot when control drops it).
//
// # What belongs here
//
// Every statement on a table the relay keeps for itself: a new state table's SQL (for example
// the fan-out engine's per-endpoint delivery state) goes in a file of its own here, named for
// the table, with the types its rows read into; the package that uses it (cdc, publisher,
// relay) calls it through a small interface or these concrete functions. The engine keeps its
// publisher.Store interface, so a program can plug its own store.
//
// Still elsewhere, to move here (issue 23): the status marks (publisher.Marker), dead letters,
// parked aggregates, per-pipeline events and backfill pages (publisher.PGStore), replay
// --since progress (publisher/since_store.go), a new slot's backfill list (cdc/backfill.go). Operator requests (reshard, pause, replay, drop-pipeline)
// are internal/control's: their SQL moves here when that package's protocols call it. The
// status report (internal/inspect) reads everything, and stays a reader.
package state
