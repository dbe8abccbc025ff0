// Package control is the operator's requests to running relays, written and read in one place:
// the command that writes a request and the relay that acts on it share its encoder and its
// decoder here, so a request's format changes in one file.
//
// # Reshard
//
// A pipeline's shard count changes in steps recorded in its outbox_reshard row (Reshard), which
// `outbox-relay reshard` writes (Resharder) and every relay of the pipeline reads (ReadReshard,
// RecordFence):
//
//  1. the new shards' publications and slots are created, the highest of their start positions
//     is recorded as the fence F, and every new slot not yet streamed is advanced to F;
//  2. the new shards deliver nothing until every old slot has confirmed F (RecordFence records
//     that, in one statement, when it is true); the old shards retire once theirs has;
//  3. the old slots and publications are dropped (DropPipeline), once no relay streams them;
//  4. the row is marked finished; a relay refuses a shard count that contradicts it.
//
// The ordering guarantee: every event committed at or before F is delivered by an old shard
// before a new shard delivers anything, so an aggregate's events up to the fence all arrive
// before any of its later ones. Restarts change nothing: the fence and the slots' positions
// are in the database, and a run after an interruption continues from the step recorded.
//
// # Pause and resume
//
// A pipeline's row of outbox_pipeline_control (Pause) says whether it is paused and why:
// `outbox-relay pause` and `resume` write it (SetPaused), and so does the relay itself when a
// webhook answers 410 Gone; the relay that leads the pipeline polls it (ReadPause). Every write
// grows its version, so a poller sees a pause and a resume that both came between two polls.
//
// # Replay
//
// RequestReplay selects parked aggregates (all, some, or the one of an event) and writes the
// replay request into the WAL in the same transaction, so the relay meets it at its place among
// the transactions. The message's format is internal/controlmsg's (Replay.Emit writes it,
// DecodeReplay reads it for the stream's decoder): a leaf both sides import, so that this
// protocol takes no type from cdc.
//
// # Drop a pipeline
//
// DropPipeline drops a pipeline's slot and publication, refused while a process streams the
// slot (ErrSlotActive), and forgets the slot's records.
//
// # What belongs here
//
// Every request an operator sends a running relay: its row or WAL message, the function that
// writes it and the one that reads it back, and the protocol that orders its steps. The SQL of
// this package's own rows, outbox_reshard and outbox_pipeline_control, is here and not in
// internal/state, on purpose: a protocol and its row are one unit (RecordFence's statement is
// the fence's guarantee, Resharder's steps are the row's states), so a new step or column lands
// in one file. What a request reads of the relay's state tables is internal/state's, called from
// here: the replay's parked aggregates and their events (state.SelectParked, ParkedEvents), the
// backfill a fence waits on (state.BackfillOutstanding), a dropped slot's records
// (state.ForgetSlot). `replay --since` writes its outbox_replays row through internal/state
// (RequestReplaySince, since.go, calls state.CountReplay and RecordReplay; the
// engine pages it through the same file). The command line (flags, printing) stays in
// cmd/outbox-relay; what the engine does once a request arrives stays in publisher (pausing,
// replaying), and when the relay polls stays in relay. internal/schema's source check refuses a
// query of outbox_reshard or outbox_pipeline_control outside this package (the status report
// aside).
package control
