package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
)

// Backlog is the store.Backlog of a pipeline's endpoints, on the relay's tables.
type Backlog struct {
	Pool     *pgxpool.Pool
	Pipeline string
	// Schema is the PostgreSQL schema of the relay's tables (see Pipeline.Schema).
	Schema string
}

var _ store.ReplayBacklog = Backlog{}

// Spill implements store.Backlog.
func (s Backlog) Spill(ctx context.Context, endpoint string, es []store.BacklogEntry) error {
	return state.SpillBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, entries(es))
}

// SpillReplay implements store.ReplayBacklog.
func (s Backlog) SpillReplay(ctx context.Context, endpoint string, es []store.BacklogEntry, st store.SinceState) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if err := state.SpillBacklog(ctx, tx, s.Schema, s.Pipeline, endpoint, entries(es)); err != nil {
			return err
		}
		return state.RecordReplayProgress(ctx, tx, s.Schema, state.Replay{ID: st.ID, Sent: st.Sent,
			After: state.ReplayCursor(st.After), Done: st.Done})
	})
}

func entries(es []store.BacklogEntry) []state.BacklogEntry {
	rows := make([]state.BacklogEntry, len(es))
	for i, e := range es {
		rows[i] = state.BacklogEntry{LSN: e.Pos.LSN, Idx: e.Pos.Idx, EventID: e.EventID, Attempts: e.Attempts, Mark: e.Mark}
	}
	return rows
}

// Page implements store.Backlog.
func (s Backlog) Page(ctx context.Context, endpoint string, after, through store.BacklogPos, limit int) ([]store.BacklogEvent, error) {
	rows, err := state.BacklogPage(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, after.LSN, after.Idx, through.LSN, through.Idx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]store.BacklogEvent, len(rows))
	for i, r := range rows {
		out[i].BacklogEntry = store.BacklogEntry{Pos: store.BacklogPos{LSN: r.LSN, Idx: r.Idx}, EventID: r.EventID, Attempts: r.Attempts, Mark: r.Mark}
		if !r.Missing {
			out[i].Message = message(r.Event)
		}
	}
	return out, nil
}

// Trim implements store.Backlog.
func (s Backlog) Trim(ctx context.Context, endpoint string, upTo store.BacklogPos) (int64, error) {
	return state.TrimBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint, upTo.LSN, upTo.Idx)
}

// Drop implements store.Backlog.
func (s Backlog) Drop(ctx context.Context, endpoint string) ([]store.BacklogEntry, error) {
	rows, err := state.DropBacklog(ctx, s.Pool, s.Schema, s.Pipeline, endpoint)
	if err != nil {
		return nil, err
	}
	out := make([]store.BacklogEntry, len(rows))
	for i, r := range rows {
		out[i] = store.BacklogEntry{Pos: store.BacklogPos{LSN: r.LSN, Idx: r.Idx}, EventID: r.EventID, Attempts: r.Attempts, Mark: r.Mark}
	}
	return out, nil
}

// Sizes implements store.Backlog.
func (s Backlog) Sizes(ctx context.Context) (map[string]store.BacklogSize, error) {
	rows, err := state.BacklogSizes(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.BacklogSize, len(rows))
	for id, r := range rows {
		out[id] = store.BacklogSize{Entries: r.Entries, Last: store.BacklogPos{LSN: r.LSN, Idx: r.Idx}}
	}
	return out, nil
}

// Oldest implements store.Backlog.
func (s Backlog) Oldest(ctx context.Context, endpoints []string) (map[string]time.Time, error) {
	return state.BacklogOldest(ctx, s.Pool, s.Schema, s.Pipeline, endpoints)
}
