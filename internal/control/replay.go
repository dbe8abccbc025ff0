package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// ReplaySelection chooses the parked aggregates to replay.
type ReplaySelection struct {
	All        bool
	Aggregates []controlmsg.Aggregate
	EventID    string // the aggregate of this failed or parked event
	// Pipeline is the pipeline whose parked aggregates are chosen. Empty: the only pipeline
	// with parked aggregates, or "default" when none has any; an error (ErrPipelineNeeded)
	// when several have.
	Pipeline string
	// Schema is the PostgreSQL schema of the outbox tables. Empty: as the connection's
	// search_path resolves them.
	Schema string
}

// ErrPipelineNeeded means parked aggregates of several pipelines exist and the selection names
// none.
var ErrPipelineNeeded = errors.New("several pipelines have parked aggregates: choose one")

// ReplayItem is one event a replay re-sends.
type ReplayItem struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Status    string `json:"status"`
	LastError string `json:"last_error,omitempty"`
}

// ReplayPlan is what a replay re-sends, per aggregate, in commit order.
type ReplayPlan struct {
	Aggregate controlmsg.Aggregate `json:"aggregate"`
	Reason    string               `json:"reason"`
	Events    []ReplayItem         `json:"events"`
}

// ErrNothingToReplay means the selection names no parked aggregate.
var ErrNothingToReplay = errors.New("nothing to replay: no parked aggregate matches")

// RequestReplay finds the parked aggregates the selection names and, unless dryRun, writes a
// replay request into the WAL as a transactional logical decoding message. The relay meets the
// request at its place in the stream, after every event committed before it and before every
// event committed after it, and re-sends the aggregates' failed and parked events there, in
// their original order and with their original ids, then unparks them.
func RequestReplay(ctx context.Context, conn *pgx.Conn, sel ReplaySelection, dryRun bool) ([]ReplayPlan, error) {
	var plans []ReplayPlan
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if sel.Pipeline == "" {
			names, err := state.ParkedPipelines(ctx, tx, sel.Schema)
			if err != nil {
				return err
			}
			switch len(names) {
			case 0:
				sel.Pipeline = "default"
			case 1:
				sel.Pipeline = names[0]
			default:
				return fmt.Errorf("%w (%s)", ErrPipelineNeeded, strings.Join(names, ", "))
			}
		}
		aggs, err := selectParked(ctx, tx, sel)
		if err != nil {
			return err
		}
		if len(aggs) == 0 {
			return ErrNothingToReplay
		}
		for _, a := range aggs {
			plan, err := planFor(ctx, tx, sel.Schema, a, sel.Pipeline)
			if err != nil {
				return err
			}
			plans = append(plans, plan)
		}
		if dryRun {
			return nil
		}
		return emitReplay(ctx, tx, aggs, sel.Pipeline)
	})
	return plans, err
}

func selectParked(ctx context.Context, tx pgx.Tx, sel ReplaySelection) ([]controlmsg.Aggregate, error) {
	var aggs []state.Aggregate
	for _, a := range sel.Aggregates {
		aggs = append(aggs, state.Aggregate{Type: a.Type, ID: a.ID})
	}
	found, err := state.SelectParked(ctx, tx, sel.Schema, sel.Pipeline, sel.All, aggs, sel.EventID)
	if err != nil {
		return nil, err
	}
	out := make([]controlmsg.Aggregate, len(found))
	for i, a := range found {
		out[i] = controlmsg.Aggregate{Type: a.Type, ID: a.ID}
	}
	return out, nil
}

func planFor(ctx context.Context, tx pgx.Tx, s string, a controlmsg.Aggregate, pipeline string) (ReplayPlan, error) {
	plan := ReplayPlan{Aggregate: a}
	agg := state.Aggregate{Type: a.Type, ID: a.ID}
	reason, own, err := state.ParkedReason(ctx, tx, s, pipeline, agg)
	if err != nil {
		return plan, err
	}
	plan.Reason = reason
	evs, err := state.ParkedEvents(ctx, tx, s, pipeline, agg, own)
	if err != nil {
		return plan, err
	}
	plan.Events = make([]ReplayItem, 0, len(evs)) // [] in JSON, as pgx.CollectRows gave, never null
	for _, e := range evs {
		plan.Events = append(plan.Events, ReplayItem{ID: e.ID, EventType: e.EventType, Status: e.Status, LastError: e.LastError})
	}
	return plan, nil
}

func emitReplay(ctx context.Context, tx pgx.Tx, aggs []controlmsg.Aggregate, pipeline string) error {
	if pipeline == "default" {
		pipeline = "" // as before pipelines: a relay of an older release obeys it too
	}
	return controlmsg.Replay{Aggregates: aggs, Pipeline: pipeline}.Emit(ctx, tx)
}
