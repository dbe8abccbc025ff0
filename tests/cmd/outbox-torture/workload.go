package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The endpoints run's workload (TORTURE_ENDPOINTS): aggregates of three types, each owned by
// one of the tenants or by none, and events of a few types per aggregate type, so that every
// part of a subscription (tenant, event-type patterns, aggregate types) routes some events
// and refuses others. The default run keeps one type, "order", and no tenant.

// aggTypes and eventTypes are the endpoints run's aggregate types and their event types.
var (
	aggTypes   = []string{"order", "invoice", "customer"}
	eventTypes = map[string][]string{
		"order":    {"order.created", "order.paid", "order.shipped"},
		"invoice":  {"invoice.created", "invoice.paid"},
		"customer": {"customer.updated", "customer.deleted"},
	}
)

// aggregateOf is aggregate a of the run: in an endpoints run its type cycles through aggTypes
// and its tenant through the tenants and none (so that each tenant has aggregates of each
// type, and some aggregates have no tenant).
func aggregateOf(a int, cfg config) aggregate {
	if !cfg.Endpoints {
		return aggregate{Type: aggregateType, ID: strconv.Itoa(a)}
	}
	return aggregate{Type: aggTypes[a%len(aggTypes)], ID: strconv.Itoa(a), Tenant: tenantName(a/len(aggTypes)%(cfg.Tenants+1), cfg.Tenants)}
}

// tenantName is tenant k of n; k == n (or beyond) is no tenant.
func tenantName(k, n int) string {
	if k >= n {
		return ""
	}
	return fmt.Sprintf("t%02d", k)
}

// insertRoutedSQL writes one event with its tenant and puts clock_timestamp() into its
// payload. The server evaluates VALUES only once the statement holds its ROW EXCLUSIVE lock on
// outbox_events (taken when the statement is parsed or its plan revalidated, before it runs),
// so the time is one at which the transaction already blocks an endpoint change's LOCK TABLE.
const insertRoutedSQL = `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, tenant_id)
	VALUES ($1, $2, $3, jsonb_build_object('seq', $4::int, 'writer', $5::int, 'at', clock_timestamp()), NULLIF($6, ''))
	RETURNING id::text, (payload->>'at')::timestamptz`

// insertRouted writes the next event of agg in tx and returns it with the server's time of the
// insert.
func (w *writer) insertRouted(ctx context.Context, tx pgx.Tx, agg aggregate, seq int) (event, time.Time, error) {
	types := eventTypes[agg.Type]
	e := event{Aggregate: agg.key(), Seq: seq, Tenant: agg.Tenant, AggType: agg.Type,
		EventType: types[w.rng.IntN(len(types))]}
	var at time.Time
	err := tx.QueryRow(ctx, insertRoutedSQL, agg.Type, agg.ID, e.EventType, seq, w.idx, agg.Tenant).Scan(&e.ID, &at)
	return e, at, err
}
