// Package schema is what the relay knows about its tables: their names, the columns each
// migration gives them, the PostgreSQL schema (namespace) that holds them, and what a database
// holds of them. It imports no other package of this module, so the migrations, the start-up
// check, the status report and every query take their names from this one place.
//
// # Which schema
//
// The relay's tables live in one schema of the database, and every command and library entry
// point finds it the same way (Resolve): the schema named explicitly (--schema,
// OUTBOX_RELAY_SCHEMA, `schema:` in the pipelines file, a Schema field in Go), or else the
// connection's current_schema(), the first schema on its search_path that exists. Queries name
// the tables qualified with it (SQL), so a table of the same name in another schema is never
// read or written.
//
// # Shape
//
// Tables lists every table, column, named index and trigger the migrations create, with the
// version that added each.
// Read returns what one schema of a database holds of them, and Found tells which pieces are
// missing, so a schema installed from the SQL files by another tool (Flyway, Atlas, psql -f)
// is recognised by its tables and columns, not only by a version table.
package schema

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// The relay's tables.
const (
	Events          = "outbox_events"
	Parked          = "outbox_parked_aggregates"
	Backfill        = "outbox_backfill"
	Slots           = "outbox_slots"
	PipelineEvents  = "outbox_pipeline_events"
	PipelineControl = "outbox_pipeline_control"
	Replays         = "outbox_replays"
	Reshard         = "outbox_reshard"
	SlotLocation    = "outbox_slot_location"
	// Endpoints holds the partner webhooks a pipeline run with endpoints fans out to.
	Endpoints = "outbox_endpoints"
	// EndpointVersions is the endpoint state each pipeline applied, by the commit LSN of each
	// change (internal/state's endpoints.go).
	EndpointVersions = "outbox_endpoint_versions"
	// EndpointStatus is what each pipeline's endpoint lanes last reported.
	EndpointStatus = "outbox_endpoint_status"
	// EndpointBacklog holds the events each endpoint spilled off the WAL, in stream order.
	EndpointBacklog = "outbox_endpoint_backlog"
	// DeliveryAttempts is the delivery log's failed attempts, one row each.
	DeliveryAttempts = "outbox_delivery_attempts"
	// Deliveries is the delivery log's successes, one row per flush.
	Deliveries = "outbox_deliveries"
	// EventTypes is the event-type catalog (package catalog).
	EventTypes = "outbox_event_types"
	// APIAudit records every change made through the management API (package api).
	APIAudit = "outbox_api_audit"
	// APIIdempotency keeps the first answer of an API create sent with an Idempotency-Key.
	APIIdempotency = "outbox_api_idempotency"
	// PortalSessions are the sign-in sessions of the partner portal and the operator console
	// (package portal).
	PortalSessions = "outbox_portal_sessions"
	// EndpointOutages holds the endpoints whose circuit breaker is open on some shard or relay,
	// so that one of them reports the recovery.
	EndpointOutages = "outbox_endpoint_outages"
	// Inbox is the consumer side's table; the relay itself neither reads nor needs it.
	Inbox = "inbox_events"
)

// Version tables.
const (
	// VersionTable records the relay's applied migrations (goose's layout), in the schema of its
	// tables.
	VersionTable = "outbox_relay_schema"
	// LegacyVersionTable is goose's default table, shared with any other goose user of the
	// schema, where releases up to LegacyLatest recorded the relay's versions.
	LegacyVersionTable = "goose_db_version"
	// LegacyLatest is the last migration version ever recorded in LegacyVersionTable; later
	// versions go only into VersionTable.
	LegacyLatest = 10
	// InboxVersionTable records the inbox set's applied versions (migrations.UpInbox), in the
	// schema of inbox_events: the inbox's own history, apart from the relay's.
	InboxVersionTable = "outbox_relay_inbox_schema"
)

// Column is one column and the migration version that added it.
type Column struct {
	Name  string
	Since int64
}

// Index is one index the migrations create by name, and the version that created it. (Primary
// keys come with their tables.)
type Index struct {
	Name  string
	Since int64
}

// Trigger is one trigger the migrations create on a table, and the version that created it.
type Trigger struct {
	Name  string
	Since int64
}

// Table is one table, the migration version that created it, and its columns and named indexes
// as the migrations leave them.
type Table struct {
	Name    string
	Since   int64
	Columns []Column
	Indexes []Index
	// Triggers are the table's triggers; one that is disabled counts as missing.
	Triggers []Trigger
	// Inbox marks the consumer side's table: the relay does not require it.
	Inbox bool
}

// Tables are the tables the migrations create, in creation order, with every column, named
// index and trigger they add. TestTablesMatchTheMigrations (migrations package) compares this with the
// catalog after each version, so a migration that adds a table, a column or an index fails that
// test until it is listed here; every version must add at least one of them, so that a schema's
// shape tells its version.
var Tables = []Table{
	{Name: Events, Since: 1, Columns: []Column{
		{"id", 1}, {"aggregate_type", 1}, {"aggregate_id", 1}, {"event_type", 1}, {"payload", 1}, {"dedup_key", 1},
		{"status", 1}, {"retries", 1}, {"available_at", 1}, {"created_at", 1}, {"processed_at", 1},
		{"last_error", 2}, {"headers", 3}, {"event_sequence", 4}, {"insert_seq", 6}, {"tenant_id", 13},
	}, Indexes: []Index{{"idx_outbox_status_available", 1}, {"uq_outbox_dedup_key", 1}, {"outbox_events_replay_order", 11}}},
	{Name: Inbox, Since: 1, Inbox: true, Columns: []Column{
		{"id", 1}, {"received_at", 1}, {"processed_at", 1}, {"handler_status", 1}, {"payload", 1}, {"signature", 1},
	}, Indexes: []Index{{"idx_inbox_handler_status", 1}}},
	{Name: Parked, Since: 2, Columns: []Column{
		{"aggregate_type", 2}, {"aggregate_id", 2}, {"first_event_id", 2}, {"reason", 2}, {"parked_at", 2},
		{"pipeline", 7}, {"own_state", 7},
	}},
	{Name: Backfill, Since: 5, Columns: []Column{{"slot", 5}, {"position", 5}, {"event_id", 5}},
		Indexes: []Index{{"outbox_backfill_event", 11}}},
	{Name: Slots, Since: 6, Columns: []Column{
		{"slot", 6}, {"created_at", 6}, {"snapshot_xmin", 6}, {"backfill", 6}, {"publication_oid", 10},
	}},
	{Name: PipelineEvents, Since: 7, Columns: []Column{
		{"pipeline", 7}, {"event_id", 7}, {"status", 7}, {"retries", 7}, {"last_error", 7}, {"event_sequence", 7},
		{"updated_at", 7},
	}, Indexes: []Index{{"outbox_pipeline_events_event", 15}}},
	{Name: PipelineControl, Since: 8, Columns: []Column{
		{"pipeline", 8}, {"paused", 8}, {"reason", 8}, {"paused_at", 8}, {"version", 8}, {"updated_at", 8},
	}},
	{Name: Replays, Since: 8, Columns: []Column{
		{"id", 8}, {"pipeline", 8}, {"since", 8}, {"until", 8}, {"aggregate_type", 8}, {"event_type", 8},
		{"requested_at", 8}, {"total", 8}, {"sent", 8}, {"after_sequence", 8}, {"after_insert", 8}, {"after_id", 8},
		{"request_lsn", 8}, {"state", 8}, {"finished_at", 8}, {"event_id", 17},
	}, Indexes: []Index{{"outbox_replays_open", 15}}},
	{Name: Reshard, Since: 9, Columns: []Column{
		{"pipeline", 9}, {"from_shards", 9}, {"to_shards", 9}, {"old_slots", 9}, {"old_pubs", 9}, {"new_slots", 9},
		{"fence", 9}, {"started_at", 9}, {"finished_at", 9}, {"fence_reached_at", 12},
	}},
	{Name: SlotLocation, Since: 12, Columns: []Column{
		{"slot", 12}, {"server", 12}, {"move_to", 12}, {"move_fence", 12}, {"move_reached_at", 12}, {"updated_at", 12},
	}},
	{Name: Endpoints, Since: 13, Columns: []Column{
		{"id", 13}, {"url", 13}, {"secrets", 13}, {"scheme", 13}, {"format", 13}, {"batch_max_events", 13},
		{"batch_max_bytes", 13}, {"batch_linger_ms", 13}, {"tenant_id", 13}, {"event_types", 13},
		{"aggregate_types", 13}, {"rate_limit", 13}, {"max_in_flight", 13}, {"state", 13}, {"paused_reason", 13},
		{"paused_at", 13}, {"disabled_reason", 13}, {"disabled_at", 13}, {"allow_private_url", 13}, {"metadata", 13},
		{"created_at", 13}, {"updated_at", 13}, {"spill_after_ms", 15}, {"deny_private", 16}, {"egress_proxy", 16},
		{"description", 17},
	}, Indexes: []Index{{"idx_outbox_endpoints_tenant", 13}},
		// They write each change as a logical decoding message (the function
		// outbox_endpoints_emit): without them a relay with endpoints never learns of a change.
		Triggers: []Trigger{{"outbox_endpoints_emit_row", 14}, {"outbox_endpoints_emit_truncate", 14}}},
	{Name: EndpointVersions, Since: 14, Columns: []Column{
		{"pipeline", 14}, {"endpoint_id", 14}, {"lsn", 14}, {"row", 14}, {"recorded_at", 14},
	}},
	{Name: EndpointStatus, Since: 14, Columns: []Column{
		{"pipeline", 14}, {"endpoint_id", 14}, {"undelivered", 14}, {"oldest_undelivered_at", 14},
		{"last_success_at", 14}, {"last_error", 14}, {"last_error_at", 14}, {"failures_in_row", 14}, {"updated_at", 14},
		{"failing_since", 15},
	}},
	{Name: EndpointBacklog, Since: 15, Columns: []Column{
		{"pipeline", 15}, {"endpoint_id", 15}, {"lsn", 15}, {"idx", 15}, {"event_id", 15}, {"attempts", 15},
		{"mark", 15}, {"spilled_at", 15},
	}, Indexes: []Index{{"outbox_endpoint_backlog_event", 15}}},
	{Name: DeliveryAttempts, Since: 15, Columns: []Column{
		{"pipeline", 15}, {"endpoint_id", 15}, {"event_id", 15}, {"attempt", 15}, {"at", 15}, {"status_code", 15},
		{"latency_ms", 15}, {"error", 15},
	}, Indexes: []Index{{"outbox_delivery_attempts_event", 15}, {"outbox_delivery_attempts_endpoint", 15}}},
	{Name: Deliveries, Since: 15, Columns: []Column{
		{"pipeline", 15}, {"endpoint_id", 15}, {"first_at", 15}, {"last_at", 15}, {"event_ids", 15},
		{"delivered_at", 15}, {"attempts", 15}, {"latency_ms", 15},
	}, Indexes: []Index{{"outbox_deliveries_event", 15}, {"outbox_deliveries_endpoint", 15}}},
	{Name: EventTypes, Since: 16, Columns: []Column{
		{"name", 16}, {"description", 16}, {"schema", 16}, {"example", 16}, {"deprecated", 16}, {"replaced_by", 16},
		{"created_at", 16}, {"updated_at", 16},
	}},
	{Name: APIAudit, Since: 17, Columns: []Column{
		{"id", 17}, {"at", 17}, {"actor_kind", 17}, {"actor", 17}, {"action", 17}, {"tenant_id", 17}, {"endpoint_id", 17},
		{"detail", 17},
	}, Indexes: []Index{{"outbox_api_audit_tenant", 17}, {"outbox_api_audit_endpoint", 17}}},
	{Name: APIIdempotency, Since: 17, Columns: []Column{
		{"principal", 17}, {"key", 17}, {"request_hash", 17}, {"status", 17}, {"body", 17}, {"created_at", 17},
	}, Indexes: []Index{{"outbox_api_idempotency_created", 17}}},
	{Name: PortalSessions, Since: 18, Columns: []Column{
		{"id_hash", 18}, {"kind", 18}, {"principal", 18}, {"link_hash", 18}, {"created_at", 18}, {"expires_at", 18},
		{"keep_until", 18},
	}, Indexes: []Index{{"outbox_portal_sessions_keep", 18}, {"outbox_portal_sessions_link_key", 18}}},
	{Name: EndpointOutages, Since: 19, Columns: []Column{{"endpoint_id", 19}, {"began_at", 19}}},
}

// CoreColumns are the outbox_events columns of the first migration: a table of that name
// without them is another application's.
func CoreColumns() []string { return FirstColumns(Events) }

// FirstColumns are the columns table has from the migration that creates it (nil for a table
// Tables does not list): a table of that name without them is another application's.
func FirstColumns(table string) []string {
	var cols []string
	for _, t := range Tables {
		if t.Name != table {
			continue
		}
		for _, c := range t.Columns {
			if c.Since == t.Since {
				cols = append(cols, c.Name)
			}
		}
	}
	return cols
}

// Names lists every table name of Tables.
func Names() []string {
	names := make([]string, len(Tables))
	for i, t := range Tables {
		names[i] = t.Name
	}
	return names
}

// Qualify returns table in schema s as one quoted identifier ("app"."outbox_events"). With s
// empty it returns the table's bare name, which the connection's search_path resolves: the
// behaviour of a library caller that names no schema.
func Qualify(s, table string) string {
	if s == "" {
		return table
	}
	return pgx.Identifier{s, table}.Sanitize()
}

// replacers caches one strings.Replacer per schema name for SQL, and qualified the queries it
// returned (the queries are constants, so few), up to maxQualified of them.
var (
	replacers  sync.Map // string → *strings.Replacer
	qualified  sync.Map // qualifiedKey → string
	nQualified atomic.Int64
)

type qualifiedKey struct{ schema, query string }

// maxQualified bounds the cache of SQL: a query built at run time is replaced every time once
// it is full, never cached without bound.
const maxQualified = 1024

// SQL returns query with every {table} placeholder (for each table of Tables,
// {outbox_relay_schema} and {outbox_relay_inbox_schema}) replaced by Qualify(s, table): queries are written once with
// placeholders, and every execution names the tables of one schema. Any other text, braces
// included, is left alone. A query seen before costs a map lookup.
func SQL(s, query string) string {
	k := qualifiedKey{s, query}
	if q, ok := qualified.Load(k); ok {
		return q.(string)
	}
	q := replacer(s).Replace(query)
	if nQualified.Load() < maxQualified {
		if _, loaded := qualified.LoadOrStore(k, q); !loaded {
			nQualified.Add(1)
		}
	}
	return q
}

func replacer(s string) *strings.Replacer {
	r, ok := replacers.Load(s)
	if !ok {
		var pairs []string
		for _, name := range append(Names(), VersionTable, InboxVersionTable) {
			pairs = append(pairs, "{"+name+"}", Qualify(s, name))
		}
		r, _ = replacers.LoadOrStore(s, strings.NewReplacer(pairs...))
	}
	return r.(*strings.Replacer)
}

// Quote quotes a schema name as an identifier, for statements that name the schema itself.
func Quote(s string) string { return pgx.Identifier{s}.Sanitize() }
