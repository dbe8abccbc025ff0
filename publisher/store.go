package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Store keeps dead letters and parked aggregates durable. The publisher writes through it
// before acknowledging an event it will not deliver now, so the slot can move past the event
// while its row still holds everything a replay needs.
type Store interface {
	// Parked returns the parked aggregates, loaded at start.
	Parked(ctx context.Context) ([]cdc.Aggregate, error)
	// DeadLetter marks m failed with its attempts and last error, and parks its aggregate.
	DeadLetter(ctx context.Context, m *envelope.Message, attempts int, lastErr string) error
	// Park marks events held behind a dead letter.
	Park(ctx context.Context, ms []*envelope.Message) error
	// Replayable returns the failed and parked events of an aggregate in commit order, to be
	// re-sent within tx (the replay request's transaction): each keeps its recorded Sequence,
	// or, if none was recorded, takes one at tx's commit LSN.
	Replayable(ctx context.Context, agg cdc.Aggregate, tx *cdc.Tx) ([]*envelope.Message, error)
	// Unpark forgets a parked aggregate once its replay is delivered.
	Unpark(ctx context.Context, agg cdc.Aggregate) error
	// BackfillPage returns up to limit still-pending backfill events of slot after position
	// after, in order, to be sent within tx (a Backfill transaction), and the last position
	// read. Each event's Sequence is at tx's commit LSN, its index its backfill position.
	BackfillPage(ctx context.Context, slot string, after int64, limit int, tx *cdc.Tx) ([]*envelope.Message, int64, error)
	// BackfillDone forgets a slot's backfill.
	BackfillDone(ctx context.Context, slot string) error
	// Abandoned records an event a shadow pipeline gave up on after its last attempt; it is
	// settled, never parked.
	Abandoned(ctx context.Context, m *envelope.Message, attempts int, lastErr string) error
}

// PGStore is the Store on the outbox tables, scoped to one pipeline.
type PGStore struct {
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

func (s PGStore) pipeline() string {
	if s.Pipeline == "" {
		return "default"
	}
	return s.Pipeline
}

// Parked implements Store.
func (s PGStore) Parked(ctx context.Context) ([]cdc.Aggregate, error) {
	aggs, err := state.ParkedAggregates(ctx, s.Pool, s.Schema, s.pipeline())
	if err != nil {
		return nil, err
	}
	out := make([]cdc.Aggregate, len(aggs))
	for i, a := range aggs {
		out[i] = cdc.Aggregate{Type: a.Type, ID: a.ID}
	}
	return out, nil
}

// DeadLetter implements Store.
func (s PGStore) DeadLetter(ctx context.Context, ev *envelope.Message, attempts int, lastErr string) error {
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

// Abandoned implements Store.
func (s PGStore) Abandoned(ctx context.Context, ev *envelope.Message, attempts int, lastErr string) error {
	n, err := state.RecordPipelineEvent(ctx, s.Pool, s.Schema, s.pipeline(), ev.ID, "abandoned", attempts-1, lastErr, ev.Sequence)
	if err != nil {
		return err
	}
	return visible(n, 1)
}

// Park implements Store.
func (s PGStore) Park(ctx context.Context, evs []*envelope.Message) error {
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
var errNotVisible = errors.New("outbox rows not visible yet")

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

// Replayable implements Store.
func (s PGStore) Replayable(ctx context.Context, agg cdc.Aggregate, tx *cdc.Tx) ([]*envelope.Message, error) {
	rows, err := state.Replayable(ctx, s.Pool, s.Schema, s.pipeline(), state.Aggregate{Type: agg.Type, ID: agg.ID}, s.OwnState)
	if err != nil {
		return nil, err
	}
	var evs []*envelope.Message
	for _, r := range rows {
		ev := message(r)
		if ev.Sequence == "" {
			ev.Sequence = envelope.Sequence(uint64(tx.CommitLSN), 0)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Unpark implements Store.
func (s PGStore) Unpark(ctx context.Context, agg cdc.Aggregate) error {
	a := state.Aggregate{Type: agg.Type, ID: agg.ID}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := state.Unpark(ctx, tx, s.Schema, s.pipeline(), a); err != nil || !s.OwnState {
			return err
		}
		// The replay delivered them: this pipeline's record of them is done.
		return state.ForgetReplayed(ctx, tx, s.Schema, s.pipeline(), a)
	})
}

// BackfillPage implements Store.
func (s PGStore) BackfillPage(ctx context.Context, slot string, after int64, limit int, tx *cdc.Tx) ([]*envelope.Message, int64, error) {
	rows, err := state.BackfillPage(ctx, s.Pool, s.Schema, slot, after, limit, s.OwnState)
	if err != nil {
		return nil, after, err
	}
	var evs []*envelope.Message
	last := after
	for _, r := range rows {
		ev := message(r.Event)
		ev.Sequence, last = envelope.Sequence(uint64(tx.CommitLSN), int(r.Position)), r.Position
		evs = append(evs, ev)
	}
	return evs, last, nil
}

// BackfillDone implements Store.
func (s PGStore) BackfillDone(ctx context.Context, slot string) error {
	return state.BackfillDone(ctx, s.Pool, s.Schema, slot)
}

// SinceState implements SinceStore.
func (s PGStore) SinceState(ctx context.Context, id int64) (SinceState, error) {
	r, err := state.ReadReplay(ctx, s.Pool, s.Schema, id)
	return SinceState{
		SinceRequest: SinceRequest{Pipeline: r.Pipeline, Since: r.Since, Until: r.Until, AggregateType: r.AggregateType,
			EventType: r.EventType, EventID: r.EventID},
		ID: id, Total: r.Total, Sent: r.Sent, After: SinceCursor(r.After), Done: r.Done,
	}, err
}

// SincePage implements SinceStore.
func (s PGStore) SincePage(ctx context.Context, st SinceState, limit int, tx *cdc.Tx) ([]*envelope.Message, SinceCursor, error) {
	rows, err := state.ReplayPage(ctx, s.Pool, s.Schema, st.replayRange(), state.ReplayCursor(st.After), limit)
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
			ev.Sequence = envelope.Sequence(uint64(tx.CommitLSN), int(r.Cursor.Insert))
		}
		after = SinceCursor(r.Cursor)
		evs = append(evs, ev)
	}
	return evs, after, nil
}

// SinceProgress implements SinceStore.
func (s PGStore) SinceProgress(ctx context.Context, st SinceState) error {
	return state.RecordReplayProgress(ctx, s.Pool, s.Schema, state.Replay{ID: st.ID, Sent: st.Sent, After: state.ReplayCursor(st.After), Done: st.Done})
}

// PGEndpointStore is the EndpointStore of a Fanout on the relay's tables, for one pipeline.
type PGEndpointStore struct {
	Pool     *pgxpool.Pool
	Pipeline string
	// Schema is the PostgreSQL schema of the relay's tables (see PGStore.Schema).
	Schema string
}

// Versions implements EndpointStore.
func (s PGEndpointStore) Versions(ctx context.Context) (pglogrepl.LSN, bool, []EndpointVersion, error) {
	marker, boot, err := state.EndpointMarker(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil || !boot {
		return 0, false, nil, err
	}
	_, vs, err := state.EndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline)
	out := make([]EndpointVersion, len(vs))
	for i, v := range vs {
		out[i] = EndpointVersion{ID: v.ID, LSN: v.LSN, Row: v.Row}
	}
	return marker, true, out, err
}

// Bootstrap implements EndpointStore.
func (s PGEndpointStore) Bootstrap(ctx context.Context) error {
	return state.BootstrapEndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline, 0)
}

// Record implements EndpointStore.
func (s PGEndpointStore) Record(ctx context.Context, v EndpointVersion) error {
	return state.RecordEndpointVersion(ctx, s.Pool, s.Schema, s.Pipeline, v.ID, v.LSN, v.Row)
}

// Prune implements EndpointStore.
func (s PGEndpointStore) Prune(ctx context.Context, confirmed pglogrepl.LSN) error {
	_, err := state.PruneEndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline, confirmed)
	return err
}

// SaveStatus implements EndpointStore.
func (s PGEndpointStore) SaveStatus(ctx context.Context, st []EndpointStatus) error {
	rows := make([]state.EndpointStatus, len(st))
	for i, e := range st {
		rows[i] = state.EndpointStatus{Pipeline: s.Pipeline, EndpointID: e.ID, Undelivered: e.Undelivered,
			OldestUndelivered: e.OldestUndelivered, LastSuccess: e.LastSuccess, LastError: e.LastError,
			LastErrorAt: e.LastErrorAt, FailuresInRow: e.FailuresInRow, FailingSince: e.FailingSince}
	}
	return state.SaveEndpointStatus(ctx, s.Pool, s.Schema, rows)
}

// FailingSince implements EndpointStore.
func (s PGEndpointStore) FailingSince(ctx context.Context) (map[string]time.Time, error) {
	return state.EndpointsFailingSince(ctx, s.Pool, s.Schema, s.Pipeline)
}

// Parked implements EndpointStore.
func (s PGEndpointStore) Parked(ctx context.Context) (map[string][]cdc.Aggregate, error) {
	byID, err := state.ParkedByEndpoint(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]cdc.Aggregate, len(byID))
	for id, aggs := range byID {
		for _, a := range aggs {
			out[id] = append(out[id], cdc.Aggregate{Type: a.Type, ID: a.ID})
		}
	}
	return out, nil
}

// ForgetStatus implements EndpointStore.
func (s PGEndpointStore) ForgetStatus(ctx context.Context, id string) error {
	return state.ForgetEndpointStatus(ctx, s.Pool, s.Schema, s.Pipeline, id)
}

// PGBacklogStore is the BacklogStore of a Fanout on the relay's tables, for one pipeline.
type PGBacklogStore struct {
	Pool     *pgxpool.Pool
	Pipeline string
	// Schema is the PostgreSQL schema of the relay's tables (see PGStore.Schema).
	Schema string
}

// Spill implements BacklogStore.
func (s PGBacklogStore) Spill(ctx context.Context, endpoint string, es []BacklogEntry) error {
	rows := make([]state.BacklogEntry, len(es))
	for i, e := range es {
		rows[i] = state.BacklogEntry{LSN: e.Pos.LSN, Idx: e.Pos.Idx, EventID: e.EventID, Attempts: e.Attempts, Mark: e.Mark}
	}
	return state.SpillBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, rows)
}

// Page implements BacklogStore.
func (s PGBacklogStore) Page(ctx context.Context, endpoint string, after, through BacklogPos, limit int) ([]BacklogEvent, error) {
	rows, err := state.BacklogPage(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, after.LSN, after.Idx, through.LSN, through.Idx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]BacklogEvent, len(rows))
	for i, r := range rows {
		out[i].BacklogEntry = BacklogEntry{Pos: BacklogPos{LSN: r.LSN, Idx: r.Idx}, EventID: r.EventID, Attempts: r.Attempts, Mark: r.Mark}
		if !r.Missing {
			out[i].Message = message(r.Event)
		}
	}
	return out, nil
}

// Trim implements BacklogStore.
func (s PGBacklogStore) Trim(ctx context.Context, endpoint string, upTo BacklogPos) (int64, error) {
	return state.TrimBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, upTo.LSN, upTo.Idx)
}

// Drop implements BacklogStore.
func (s PGBacklogStore) Drop(ctx context.Context, endpoint string) error {
	_, err := state.DropBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint)
	return err
}

// Sizes implements BacklogStore.
func (s PGBacklogStore) Sizes(ctx context.Context) (map[string]BacklogSize, error) {
	rows, err := state.BacklogSizes(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil {
		return nil, err
	}
	out := make(map[string]BacklogSize, len(rows))
	for id, r := range rows {
		out[id] = BacklogSize{Entries: r.Entries, Last: BacklogPos{LSN: r.LSN, Idx: r.Idx}}
	}
	return out, nil
}
