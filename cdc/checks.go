package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
)

// ErrSchema is wrapped when the database's outbox schema is not the one this binary needs: not
// migrated, migrated to an older version, altered by hand, or another application's
// outbox_events. The message names the fix.
var ErrSchema = errors.New("outbox schema does not fit this relay")

// checkSchema runs the check `outbox-relay status` runs (inspect.CheckSchema): the relay's
// outbox_events, migrated to the version this binary needs.
func checkSchema(ctx context.Context, conn *pgx.Conn) error {
	if err := inspect.CheckSchema(ctx, conn); err != nil {
		if errors.Is(err, inspect.ErrNoSchema) || errors.Is(err, inspect.ErrForeignTable) {
			return fmt.Errorf("%w: %w", ErrSchema, err)
		}
		return err
	}
	return nil
}

// tablePrivileges are the privileges the relay uses, per table, in GRANT order: it reads and
// marks outbox rows, keeps its own tables, and reads the schema version.
var tablePrivileges = []struct {
	table string
	privs []string
}{
	{"outbox_events", []string{"SELECT", "UPDATE"}},
	{"outbox_parked_aggregates", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"outbox_backfill", []string{"SELECT", "INSERT", "DELETE"}},
	{"outbox_slots", []string{"SELECT", "INSERT", "UPDATE"}},
	{"outbox_pipeline_events", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"outbox_pipeline_control", []string{"SELECT", "INSERT", "UPDATE"}},
	{"outbox_replays", []string{"SELECT", "UPDATE"}},
	{"outbox_reshard", []string{"SELECT", "UPDATE"}},
	{"outbox_slot_location", []string{"SELECT", "INSERT", "UPDATE"}},
	{"goose_db_version", []string{"SELECT"}},
}

// checkPrivileges fails, naming the exact GRANT statements, when the role lacks a privilege the
// relay will use on a table that exists (missing tables are checkSchema's to report).
func checkPrivileges(ctx context.Context, conn *pgx.Conn) error {
	var tables, privs []string
	for _, t := range tablePrivileges {
		for _, p := range t.privs {
			tables, privs = append(tables, t.table), append(privs, p)
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
	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil {
		return fmt.Errorf("read current user: %w", err)
	}
	return fmt.Errorf("%w on the outbox tables: run as their owner: %s", ErrNoPrivilege, grants(missing, user))
}

// grants writes the GRANT statements for missing privileges, in tablePrivileges order.
func grants(missing map[string][]string, user string) string {
	var stmts []string
	for _, t := range tablePrivileges {
		if p := missing[t.table]; len(p) > 0 {
			stmts = append(stmts, fmt.Sprintf("GRANT %s ON %s TO %s;", strings.Join(p, ", "), t.table,
				pgx.Identifier{user}.Sanitize()))
		}
	}
	return strings.Join(stmts, " ")
}
