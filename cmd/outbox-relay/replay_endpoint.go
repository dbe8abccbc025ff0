package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// endpointLane resolves `replay --endpoint ID [--pipeline P]` to the lane's name, P/ID, as the
// fan-out engine names the endpoint's publisher and its dead letters. It refuses an id that is
// not an endpoint, and warns on stderr (warn) when the endpoint is not enabled. P is --pipeline,
// else the only pipeline that runs with endpoints, else "default".
func endpointLane(ctx context.Context, conn *pgx.Conn, fs *pflag.FlagSet, s string, warn io.Writer) (lane string, e endpoints.Endpoint, err error) {
	id, _ := fs.GetString("endpoint")
	if err := endpointsTableIn(ctx, conn, schemaName(fs, ""), s); err != nil {
		return "", e, err
	}
	e, err = endpoints.Store{Schema: s}.Get(ctx, conn, id)
	if errors.Is(err, endpoints.ErrNotFound) {
		return "", e, fmt.Errorf("no endpoint %q: `outbox-relay endpoint list` lists them", id)
	}
	if err != nil {
		return "", e, endpointError(err, id)
	}
	switch e.State {
	case endpoints.Paused:
		fmt.Fprintf(warn, "note: endpoint %s is paused: the replay waits in its lane until `outbox-relay endpoint resume %s`\n", id, id)
	case endpoints.Disabled:
		fmt.Fprintf(warn, "note: endpoint %s is disabled: it receives nothing until `outbox-relay endpoint enable %s`\n", id, id)
	}
	p, _ := fs.GetString("pipeline")
	if p == "" {
		if p, err = onlyEndpointPipeline(ctx, conn, schemaName(fs, ""), s); err != nil {
			return "", e, err
		}
	}
	return p + "/" + id, e, nil
}

// subscribedInRange counts the rows of a replay --since range that endpoint e's current
// subscription takes (its tenant, event types and aggregate types), with the relay's own
// matcher: what the endpoint will receive of the range. pending counts those not delivered yet.
func subscribedInRange(ctx context.Context, conn *pgx.Conn, s string, r state.ReplayRange, e endpoints.Endpoint) (events, pending int64, err error) {
	groups, err := state.CountReplayGroups(ctx, conn, s, r)
	if err != nil {
		return 0, 0, err
	}
	row := endpoint.Row{TenantID: e.TenantID, EventTypes: e.EventTypes, AggregateTypes: e.AggregateTypes}
	for _, g := range groups {
		if row.Subscribed(g.TenantID, g.EventType, g.AggregateType) {
			events, pending = events+g.Events, pending+g.Pending
		}
	}
	return events, pending, nil
}

// onlyEndpointPipeline returns the one pipeline (or shard) that runs with endpoints, "default"
// when none has yet, or a usage error naming them when several do.
func onlyEndpointPipeline(ctx context.Context, conn *pgx.Conn, name, s string) (string, error) {
	if err := relayTableIn(ctx, conn, name, s, schema.EndpointVersions, 14); err != nil {
		return "", err
	}
	names, err := state.EndpointPipelines(ctx, conn, s)
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return publisher.DefaultPipeline, nil
	case 1:
		return names[0], nil
	}
	return "", usageError{fmt.Errorf("several pipelines run with endpoints (%s): choose one with --pipeline NAME", strings.Join(names, ", "))}
}

// notAnEndpointPipeline refuses a replay --since for pipeline p when p runs with endpoints: its
// relay re-sends to one endpoint at a time, and would ignore a request naming the pipeline.
func notAnEndpointPipeline(ctx context.Context, conn *pgx.Conn, s, p string) error {
	var migrated bool // a schema before migration 14 has no pipeline with endpoints
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, schema.EndpointVersions)).Scan(&migrated); err != nil || !migrated {
		return err
	}
	names, err := state.EndpointPipelines(ctx, conn, s)
	if err != nil || !slices.Contains(names, p) {
		return err
	}
	return usageError{fmt.Errorf("pipeline %s delivers to endpoints: a replay goes to one of them, "+
		"--endpoint ID (`outbox-relay endpoint list` lists them)", p)}
}

// laneEndpoint splits a lane's name into its pipeline and endpoint ("" when name is a
// pipeline's own).
func laneEndpoint(name string) (pipeline, endpoint string) {
	p, e, _ := strings.Cut(name, "/")
	return p, e
}
