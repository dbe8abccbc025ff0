package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pipeline is a pipeline's row of outbox_pipeline_control: paused or not, and why.
type Pipeline struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	Reason   string     `json:"reason"`
	PausedAt *time.Time `json:"paused_at"`
}

// readPipelines lists the pipelines that have a control row (paused or resumed at least once),
// by name.
func readPipelines(ctx context.Context, db DB) ([]Pipeline, error) {
	list := []Pipeline{}
	rows, err := db.Query(ctx, `SELECT pipeline, paused, reason, paused_at FROM outbox_pipeline_control ORDER BY pipeline`)
	if err != nil {
		return list, fmt.Errorf("read pipeline control: %w", err)
	}
	var p Pipeline
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
	for _, p := range r.Pipelines {
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
