package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Pause is a pipeline's row of outbox_pipeline_control: whether it is paused, and why. An
// operator writes it (`outbox-relay pause`, `resume`), and so does the relay when a webhook
// answers 410 Gone; the relay that leads the pipeline polls it (ReadPause).
type Pause struct {
	Pipeline string     `json:"pipeline"`
	Paused   bool       `json:"paused"`
	Reason   string     `json:"reason"`
	PausedAt *time.Time `json:"paused_at"`
	// Version grows with every write, so a reader that polls sees a pause and a resume that
	// both happened between two polls.
	Version int64 `json:"version"`
}

// Execer runs a statement and a query; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SetPaused pauses (paused true, with reason) or resumes a pipeline in outbox_pipeline_control
// of schema s (empty: as the search_path resolves it). The process that leads the pipeline
// reads it within its control poll interval, and so does any process that takes over later. It
// returns the row as written.
func SetPaused(ctx context.Context, db Execer, s, pipeline string, paused bool, reason string) (Pause, error) {
	c := Pause{Pipeline: pipeline}
	err := db.QueryRow(ctx, schema.SQL(s, `
		INSERT INTO {outbox_pipeline_control} AS c (pipeline, paused, reason, paused_at)
		VALUES ($1, $2, $3, CASE WHEN $2 THEN now() END)
		ON CONFLICT (pipeline) DO UPDATE SET paused = $2, reason = $3,
			paused_at = CASE WHEN NOT $2 THEN NULL WHEN c.paused THEN c.paused_at ELSE now() END,
			version = c.version + 1, updated_at = now()
		RETURNING paused, reason, paused_at, version`), pipeline, paused, reason).
		Scan(&c.Paused, &c.Reason, &c.PausedAt, &c.Version)
	if err != nil {
		return c, fmt.Errorf("write pipeline control: %w", err)
	}
	return c, nil
}

// ReadPause reads a pipeline's control row in schema s (empty: as the search_path resolves
// it); a pipeline without one is not paused (version 0).
func ReadPause(ctx context.Context, db Execer, s, pipeline string) (Pause, error) {
	c := Pause{Pipeline: pipeline}
	err := db.QueryRow(ctx, schema.SQL(s, `SELECT paused, reason, paused_at, version FROM {outbox_pipeline_control} WHERE pipeline = $1`),
		pipeline).Scan(&c.Paused, &c.Reason, &c.PausedAt, &c.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read pipeline control: %w", err)
	}
	return c, nil
}
