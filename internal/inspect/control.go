package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PipelineControl is a pipeline's row of outbox_pipeline_control: paused or not, and why.
type PipelineControl struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	Reason   string     `json:"reason"`
	PausedAt *time.Time `json:"paused_at"`
}

// readControl lists the pipelines that have a control row (paused or resumed at least once),
// by name.
func readControl(ctx context.Context, db DB) ([]PipelineControl, error) {
	list := []PipelineControl{}
	rows, err := db.Query(ctx, `SELECT pipeline, paused, reason, paused_at FROM {outbox_pipeline_control} ORDER BY pipeline`)
	if err != nil {
		return list, fmt.Errorf("read pipeline control: %w", err)
	}
	var p PipelineControl
	_, err = pgx.ForEachRow(rows, []any{&p.Name, &p.Paused, &p.Reason, &p.PausedAt}, func() error {
		list = append(list, p)
		return nil
	})
	if err != nil {
		return list, fmt.Errorf("read pipeline control: %w", err)
	}
	return list, nil
}

// pausedWarnings says which pipelines are paused, since when and why.
func (r Report) pausedWarnings() []string {
	var w []string
	for _, p := range r.Control {
		if !p.Paused {
			continue
		}
		since := ""
		if p.PausedAt != nil {
			since = fmt.Sprintf(" for %s", r.CheckedAt.Sub(*p.PausedAt).Round(time.Second))
		}
		w = append(w, fmt.Sprintf("pipeline %q paused%s (%s): nothing is delivered and its slot retains WAL; "+
			"`outbox-relay resume --pipeline %s` resumes it", p.Name, since, p.Reason, p.Name))
	}
	return w
}

// Replay is a `replay --since` request that is not complete.
type Replay struct {
	ID          int64     `json:"id"`
	Pipeline    string    `json:"pipeline"`
	Since       time.Time `json:"since"`
	RequestedAt time.Time `json:"requested_at"`
	Total       int64     `json:"total"`
	Sent        int64     `json:"sent"`
	// State is requested (not met by the relay yet), running, or abandoned: the slot confirmed
	// past the request a minute or more ago without completing it (the slot was dropped or
	// recreated meanwhile), so it will never run; request it again.
	State string `json:"state"`
}

// readReplays lists the replay --since requests not done, oldest first.
func readReplays(ctx context.Context, db DB, slot string) ([]Replay, error) {
	list := []Replay{}
	rows, err := db.Query(ctx, `
		SELECT r.id, r.pipeline, r.since, r.requested_at, r.total, r.sent,
		       CASE WHEN s.confirmed_flush_lsn > r.request_lsn AND r.requested_at < now() - interval '1 minute'
		            THEN 'abandoned' ELSE r.state END
		FROM {outbox_replays} r LEFT JOIN pg_replication_slots s ON s.slot_name = $1
		WHERE r.state <> 'done' ORDER BY r.id`, slot)
	if err != nil {
		return list, fmt.Errorf("read replay requests: %w", err)
	}
	var r Replay
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Pipeline, &r.Since, &r.RequestedAt, &r.Total, &r.Sent, &r.State},
		func() error { list = append(list, r); return nil })
	if err != nil {
		return list, fmt.Errorf("read replay requests: %w", err)
	}
	return list, nil
}

// replayWarnings says which replays are under way or abandoned.
func (r Report) replayWarnings() []string {
	var w []string
	for _, p := range r.Replays {
		switch p.State {
		case "abandoned":
			w = append(w, fmt.Sprintf("replay %d (pipeline %q, since %s) was abandoned after %d of %d events: its slot moved "+
				"past the request; request it again", p.ID, p.Pipeline, p.Since.UTC().Format(time.RFC3339), p.Sent, p.Total))
		default:
			w = append(w, fmt.Sprintf("replay %d (pipeline %q, since %s) %s: %d of %d events re-sent", p.ID, p.Pipeline,
				p.Since.UTC().Format(time.RFC3339), p.State, p.Sent, p.Total))
		}
	}
	return w
}
