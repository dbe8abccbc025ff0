// Package pgstore keeps the delivery engine's stores (package store) in PostgreSQL, on the
// relay's tables, through internal/state's SQL: Pipeline (a pipeline's or an endpoint lane's
// dead letters, parked aggregates, backfill and replays since a time), Endpoints (the endpoint
// versions log and status), Backlog (the endpoints' backlogs off the WAL), Marker (the status
// marks, batched on their own pool) and DeliveryLog (the delivery log, batched likewise).
//
// store/memstore is their in-memory twin; store/storetest runs the same conformance suite over
// both (pgstore's against a real cluster).
package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
)

// Pipeline is the store.Pipeline on the outbox tables, scoped to one pipeline (or one endpoint
// lane, named "<pipeline>/<endpoint>").
type Pipeline struct {
	Pool *pgxpool.Pool
	// Pipeline names the pipeline whose parked aggregates and dead letters this is. Empty:
	// "default".
	Pipeline string
	// OwnState keeps the pipeline's failed and parked events in outbox_pipeline_events instead
	// of the row's status, retries and last_error columns, which belong to one pipeline (the
	// status owner). False (the zero value): the row's columns, as before pipelines.
	OwnState bool
	// Schema is the PostgreSQL schema of the outbox tables. Empty: unqualified names, which
	// the pool's search_path resolves (its current_schema() when that holds them).
	Schema string
}

var _ store.Pipeline = Pipeline{}

func (s Pipeline) pipeline() string {
	if s.Pipeline == "" {
		return "default"
	}
	return s.Pipeline
}

// Parked implements store.DeadLetters.
func (s Pipeline) Parked(ctx context.Context) ([]store.Aggregate, error) {
	aggs, err := state.ParkedAggregates(ctx, s.Pool, s.Schema, s.pipeline())
	if err != nil {
		return nil, err
	}
	out := make([]store.Aggregate, len(aggs))
	for i, a := range aggs {
		out[i] = store.Aggregate(a)
	}
	return out, nil
}

// DeadLetter implements store.DeadLetters.
func (s Pipeline) DeadLetter(ctx context.Context, ev *envelope.Message, attempts int, lastErr string) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var n int64
		var err error
		if s.OwnState {
			n, err = state.RecordPipelineEvent(ctx, tx, s.Schema, s.pipeline(), ev.ID, "failed", attempts-1, lastErr, ev.Sequence)
		} else {
			n, err = state.MarkFailed(ctx, tx, s.Schema, ev.ID, attempts-1, lastErr, ev.Sequence)
		}
		if err != nil {
			return err
		}
		if err := visible(n, 1); err != nil {
			return err
		}
		return state.Park(ctx, tx, s.Schema, s.pipeline(), state.Aggregate{Type: ev.AggregateType, ID: ev.AggregateID}, ev.ID, lastErr, s.OwnState)
	})
}

// Abandoned implements store.DeadLetters.
func (s Pipeline) Abandoned(ctx context.Context, ev *envelope.Message, attempts int, lastErr string) error {
	n, err := state.RecordPipelineEvent(ctx, s.Pool, s.Schema, s.pipeline(), ev.ID, "abandoned", attempts-1, lastErr, ev.Sequence)
	if err != nil {
		return err
	}
	return visible(n, 1)
}

// Park implements store.DeadLetters.
func (s Pipeline) Park(ctx context.Context, evs []*envelope.Message) error {
	if len(evs) == 0 {
		return nil
	}
	ids := make([]string, len(evs))
	seqs := make([]string, len(evs))
	for i, ev := range evs {
		ids[i], seqs[i] = ev.ID, ev.Sequence
	}
	var n int64
	var err error
	if s.OwnState {
		n, err = state.ParkPipelineEvents(ctx, s.Pool, s.Schema, s.pipeline(), ids, seqs)
	} else {
		n, err = state.MarkParked(ctx, s.Pool, s.Schema, ids, seqs)
	}
	if err != nil {
		return err
	}
	return visible(n, len(ids))
}

// errNotVisible means an update found fewer rows than it named. Logical decoding can hand over a
// transaction a moment before its commit is visible to other sessions (the WAL is flushed before
// the commit is published), so an update right after receipt can miss rows; the caller retries.
var errNotVisible = store.ErrNotVisible

func visible(affected int64, want int) error {
	if affected < int64(want) {
		return fmt.Errorf("%w: updated %d of %d", errNotVisible, affected, want)
	}
	return nil
}

// message is the envelope of a row read from the state tables.
func message(e state.Event) *envelope.Message {
	return &envelope.Message{ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, EventType: e.EventType,
		Payload: e.Payload, Headers: e.Headers, Sequence: e.Sequence, CreatedAt: e.CreatedAt, TenantID: e.TenantID}
}

// Replayable implements store.DeadLetters.
func (s Pipeline) Replayable(ctx context.Context, agg store.Aggregate, at pglogrepl.LSN) ([]*envelope.Message, error) {
	rows, err := state.Replayable(ctx, s.Pool, s.Schema, s.pipeline(), state.Aggregate(agg), s.OwnState)
	if err != nil {
		return nil, err
	}
	var evs []*envelope.Message
	for _, r := range rows {
		ev := message(r)
		if ev.Sequence == "" {
			ev.Sequence = envelope.Sequence(uint64(at), 0)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Unpark implements store.DeadLetters.
func (s Pipeline) Unpark(ctx context.Context, agg store.Aggregate) error {
	a := state.Aggregate(agg)
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := state.Unpark(ctx, tx, s.Schema, s.pipeline(), a); err != nil || !s.OwnState {
			return err
		}
		// The replay delivered them: this pipeline's record of them is done.
		return state.ForgetReplayed(ctx, tx, s.Schema, s.pipeline(), a)
	})
}

// BackfillPage implements store.Backfill.
func (s Pipeline) BackfillPage(ctx context.Context, slot string, after int64, limit int, at pglogrepl.LSN) ([]*envelope.Message, int64, error) {
	rows, err := state.BackfillPage(ctx, s.Pool, s.Schema, slot, after, limit, s.OwnState)
	if err != nil {
		return nil, after, err
	}
	var evs []*envelope.Message
	last := after
	for _, r := range rows {
		ev := message(r.Event)
		ev.Sequence, last = envelope.Sequence(uint64(at), int(r.Position)), r.Position
		evs = append(evs, ev)
	}
	return evs, last, nil
}

// BackfillDone implements store.Backfill.
func (s Pipeline) BackfillDone(ctx context.Context, slot string) error {
	return state.BackfillDone(ctx, s.Pool, s.Schema, slot)
}

// SinceState implements store.Replays.
func (s Pipeline) SinceState(ctx context.Context, id int64) (store.SinceState, error) {
	r, err := state.ReadReplay(ctx, s.Pool, s.Schema, id)
	return store.SinceState{ID: id, Pipeline: r.Pipeline, Since: r.Since, Until: r.Until, AggregateType: r.AggregateType,
		EventType: r.EventType, EventID: r.EventID, Total: r.Total, Sent: r.Sent, After: store.SinceCursor(r.After), Done: r.Done}, err
}

// replayRange is what st selects, as internal/state reads it.
func replayRange(st store.SinceState) state.ReplayRange {
	return state.ReplayRange{Since: st.Since, Until: st.Until, AggregateType: st.AggregateType, EventType: st.EventType,
		EventID: st.EventID}
}

// SincePage implements store.Replays.
func (s Pipeline) SincePage(ctx context.Context, st store.SinceState, limit int, at pglogrepl.LSN) ([]*envelope.Message, store.SinceCursor, error) {
	rows, err := state.ReplayPage(ctx, s.Pool, s.Schema, replayRange(st), state.ReplayCursor(st.After), limit)
	if err != nil {
		return nil, st.After, err
	}
	after := st.After
	var evs []*envelope.Message
	for _, r := range rows {
		ev := message(r.Event)
		if ev.Sequence == "" {
			// Delivered before sequences were recorded: a new one after the request's commit LSN,
			// rising with insertion order.
			ev.Sequence = envelope.Sequence(uint64(at), int(r.Cursor.Insert))
		}
		after = store.SinceCursor(r.Cursor)
		evs = append(evs, ev)
	}
	return evs, after, nil
}

// SinceProgress implements store.Replays.
func (s Pipeline) SinceProgress(ctx context.Context, st store.SinceState) error {
	return state.RecordReplayProgress(ctx, s.Pool, s.Schema, state.Replay{ID: st.ID, Sent: st.Sent,
		After: state.ReplayCursor(st.After), Done: st.Done})
}
