package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/schemacheck"
)

// ErrSchema is wrapped when the database's outbox schema is not the one this binary needs: not
// migrated, migrated to an older version, altered by hand, or another application's
// outbox_events. The message names the fix.
var ErrSchema = errors.New("outbox schema does not fit this relay")

// checkSchema runs the check `outbox-relay status` runs (schemacheck.Check): every table,
// column and index this binary uses, in the schema named (empty: current_schema()).
func checkSchema(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := schemacheck.Check(ctx, conn, name); err != nil {
		if errors.Is(err, schemacheck.ErrNoSchema) || errors.Is(err, schemacheck.ErrForeignTable) {
			return fmt.Errorf("%w: %w", ErrSchema, err)
		}
		return err
	}
	return nil
}

// tablePrivileges are the privileges the relay uses, per table, in GRANT order: it reads and
// marks outbox rows and keeps its own tables. (The version table it reads only for messages,
// when it may.)
var tablePrivileges = []tablePrivilege{
	{schema.Events, []string{"SELECT", "UPDATE"}},
	{schema.Parked, []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{schema.Backfill, []string{"SELECT", "INSERT", "DELETE"}},
	{schema.Slots, []string{"SELECT", "INSERT", "UPDATE"}},
	{schema.PipelineEvents, []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{schema.PipelineControl, []string{"SELECT", "INSERT", "UPDATE"}},
	{schema.Replays, []string{"SELECT", "UPDATE"}},
	{schema.Reshard, []string{"SELECT", "UPDATE"}},
	{schema.SlotLocation, []string{"SELECT", "INSERT", "UPDATE"}},
}

// endpointPrivileges are the privileges a pipeline with endpoints uses besides: it reads the
// endpoints (and disables one that answers 410 Gone), and keeps their versions, status and outages.
var endpointPrivileges = []tablePrivilege{
	{schema.Endpoints, []string{"SELECT", "UPDATE"}},
	{schema.EndpointVersions, []string{"SELECT", "INSERT", "DELETE"}},
	{schema.EndpointStatus, []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{schema.EndpointOutages, []string{"SELECT", "INSERT", "DELETE"}},
}

type tablePrivilege struct {
	table string
	privs []string
}

// privilegesFor lists the privileges the relay uses, with a pipeline's endpoints or without.
func privilegesFor(endpoints bool) []tablePrivilege {
	if !endpoints {
		return tablePrivileges
	}
	return append(slices.Clip(tablePrivileges), endpointPrivileges...)
}

// checkSchemaUsage fails, naming the GRANT statements, when the role lacks USAGE on schema s:
// then no table of s can even be looked up, so it comes before every check of the tables.
// endpoints: the pipeline runs with endpoints (their tables' GRANTs too).
func checkSchemaUsage(ctx context.Context, conn *pgx.Conn, s string, endpoints bool) error {
	var usage bool
	if err := conn.QueryRow(ctx, `SELECT has_schema_privilege($1, 'USAGE')`, s).Scan(&usage); err != nil {
		return fmt.Errorf("check schema privileges: %w", err)
	}
	if !usage {
		return privilegeError(ctx, conn, s, false, privilegesFor(endpoints), nil) // every table's GRANT too: none can be checked
	}
	return nil
}

// checkPrivileges fails, naming the exact GRANT statements, when the role lacks a privilege the
// relay will use on a table of schema s that exists (missing tables are checkSchema's to
// report). checkSchemaUsage has run. endpoints: the pipeline runs with endpoints.
func checkPrivileges(ctx context.Context, conn *pgx.Conn, s string, endpoints bool) error {
	list := privilegesFor(endpoints)
	var tables, privs []string
	for _, t := range list {
		for _, p := range t.privs {
			tables, privs = append(tables, schema.Qualify(s, t.table)), append(privs, p)
		}
	}
	rows, err := conn.Query(ctx, `SELECT r.tbl, r.priv FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(tbl, priv, n)
		WHERE to_regclass(r.tbl) IS NOT NULL AND NOT has_table_privilege(to_regclass(r.tbl), r.priv) ORDER BY r.n`, tables, privs)
	if err != nil {
		return fmt.Errorf("check table privileges: %w", err)
	}
	missing := map[string][]string{}
	var table, priv string
	if _, err := pgx.ForEachRow(rows, []any{&table, &priv}, func() error {
		missing[table] = append(missing[table], priv)
		return nil
	}); err != nil {
		return fmt.Errorf("check table privileges: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	return privilegeError(ctx, conn, s, true, list, missing)
}

// privilegeError names the GRANT statements for what the role lacks: USAGE on schema s unless
// usage, and the missing privileges per qualified table (all of list when nil).
func privilegeError(ctx context.Context, conn *pgx.Conn, s string, usage bool, list []tablePrivilege,
	missing map[string][]string) error {
	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil {
		return fmt.Errorf("read current user: %w", err)
	}
	role := pgx.Identifier{user}.Sanitize()
	var stmts []string
	if !usage {
		stmts = append(stmts, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;", schema.Quote(s), role))
	}
	for _, t := range list {
		p := t.privs
		if missing != nil {
			p = missing[schema.Qualify(s, t.table)]
		}
		if len(p) > 0 {
			stmts = append(stmts, fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(p, ", "), schema.Qualify(s, t.table), role))
		}
	}
	return fmt.Errorf("%w on the outbox tables: run as their owner: %s", ErrNoPrivilege, strings.Join(stmts, " "))
}
