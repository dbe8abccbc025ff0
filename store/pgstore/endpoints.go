package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
)

// Endpoints is the store.Endpoints of a pipeline with endpoints, on the relay's tables.
type Endpoints struct {
	Pool     *pgxpool.Pool
	Pipeline string
	// Schema is the PostgreSQL schema of the relay's tables (see Pipeline.Schema).
	Schema string
}

// Versions implements store.Endpoints.
func (s Endpoints) Versions(ctx context.Context) (pglogrepl.LSN, bool, []store.EndpointVersion, error) {
	marker, boot, err := state.EndpointMarker(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil || !boot {
		return 0, false, nil, err
	}
	_, vs, err := state.EndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline)
	out := make([]store.EndpointVersion, len(vs))
	for i, v := range vs {
		out[i] = store.EndpointVersion{ID: v.ID, LSN: v.LSN, Row: v.Row}
	}
	return marker, true, out, err
}

// Bootstrap implements store.Endpoints.
func (s Endpoints) Bootstrap(ctx context.Context) error {
	return state.BootstrapEndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline, 0)
}

// Record implements store.Endpoints.
func (s Endpoints) Record(ctx context.Context, v store.EndpointVersion) error {
	return state.RecordEndpointVersion(ctx, s.Pool, s.Schema, s.Pipeline, v.ID, v.LSN, v.Row)
}

// Prune implements store.Endpoints.
func (s Endpoints) Prune(ctx context.Context, confirmed pglogrepl.LSN) error {
	_, err := state.PruneEndpointVersions(ctx, s.Pool, s.Schema, s.Pipeline, confirmed)
	return err
}

// SaveStatus implements store.Endpoints.
func (s Endpoints) SaveStatus(ctx context.Context, st []store.EndpointStatus) error {
	rows := make([]state.EndpointStatus, len(st))
	for i, e := range st {
		rows[i] = state.EndpointStatus{Pipeline: s.Pipeline, EndpointID: e.ID, Undelivered: e.Undelivered,
			OldestUndelivered: e.OldestUndelivered, LastSuccess: e.LastSuccess, LastError: e.LastError,
			LastErrorAt: e.LastErrorAt, FailuresInRow: e.FailuresInRow, FailingSince: e.FailingSince}
	}
	return state.SaveEndpointStatus(ctx, s.Pool, s.Schema, rows)
}

// FailingSince implements store.Endpoints.
func (s Endpoints) FailingSince(ctx context.Context) (map[string]time.Time, error) {
	return state.EndpointsFailingSince(ctx, s.Pool, s.Schema, s.Pipeline)
}

// Parked implements store.Endpoints.
func (s Endpoints) Parked(ctx context.Context) (map[string][]store.Aggregate, error) {
	byID, err := state.ParkedByEndpoint(ctx, s.Pool, s.Schema, s.Pipeline)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]store.Aggregate, len(byID))
	for id, aggs := range byID {
		for _, a := range aggs {
			out[id] = append(out[id], store.Aggregate{Type: a.Type, ID: a.ID})
		}
	}
	return out, nil
}

// ForgetStatus implements store.Endpoints.
func (s Endpoints) ForgetStatus(ctx context.Context, id string) error {
	return state.ForgetEndpointStatus(ctx, s.Pool, s.Schema, s.Pipeline, id)
}
