package endpoints_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// columnTypes are the casts of the columns a plain-SQL insert below names.
var columnTypes = map[string]string{
	"id": "text", "url": "text", "secrets": "jsonb", "scheme": "text", "format": "text", "batch_max_events": "int",
	"batch_max_bytes": "int", "batch_linger_ms": "int", "tenant_id": "text", "event_types": "text[]",
	"aggregate_types": "text[]", "rate_limit": "int", "max_in_flight": "int", "state": "text", "paused_reason": "text",
	"paused_at": "timestamptz", "disabled_reason": "text", "disabled_at": "timestamptz", "allow_private_url": "boolean",
	"metadata": "jsonb",
}

// baseColumns is a valid row in the text form of its columns.
func baseColumns() map[string]string {
	return map[string]string{
		"id": "base", "url": "https://partner.example/hooks", "secrets": `[{"secret": "0123456789abcdef"}]`,
		"scheme": "x-signature", "format": "raw", "batch_max_events": "1", "batch_max_bytes": "1048576",
		"batch_linger_ms": "5", "event_types": "{order.*}", "state": "enabled", "allow_private_url": "f", "metadata": "{}",
	}
}

// insertColumns inserts a row by plain SQL, its columns given as text.
func insertColumns(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, cols map[string]string) error {
	names := slices.Sorted(maps.Keys(cols))
	var vals []string
	var args []any
	for i, n := range names {
		vals = append(vals, "$"+itoa(int64(i+1))+"::"+columnTypes[n])
		args = append(args, cols[n])
	}
	_, err := q.Exec(ctx, "INSERT INTO outbox_endpoints ("+strings.Join(names, ", ")+") VALUES ("+strings.Join(vals, ", ")+")", args...)
	return err
}

// The table's CHECK constraints and endpoint.Validate (which the Go API and the CLI run before
// writing, and the relay on every row it reads) agree: a row plain SQL cannot store, the relay
// refuses too, and the Go API never meets a CHECK violation (which would abort the
// application's transaction). Each case is refused by the named constraint, and by Validate
// on the same column values decoded as the relay decodes a streamed row.
func TestCheckConstraintsAgreeWithValidate(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	if err := insertColumns(ctx, conn, baseColumns()); err != nil {
		t.Fatalf("the base row is refused: %v", err)
	}
	long := strings.Repeat("a", 1025)
	for _, tt := range []struct {
		name       string
		cols       map[string]string
		constraint string
		// sqlOnly: a value a Row holds as NULL (0, ""), so only the table can refuse it; Go
		// writes NULL for it.
		sqlOnly bool
	}{
		{"id with capitals", map[string]string{"id": "Acme"}, "id", false},
		{"id with a space", map[string]string{"id": "a b"}, "id", false},
		{"empty id", map[string]string{"id": ""}, "id", false},
		{"id of 64 characters", map[string]string{"id": strings.Repeat("a", 64)}, "id", false},
		{"ftp url", map[string]string{"url": "ftp://partner.example/"}, "url", false},
		{"url with a user", map[string]string{"url": "https://user@partner.example/"}, "url", false},
		{"url without host", map[string]string{"url": "https:///hooks"}, "url", false},
		{"url with a space", map[string]string{"url": "https://partner.example/a b"}, "url", false},
		{"url of 2049 bytes", map[string]string{"url": "https://partner.example/" + strings.Repeat("a", 2049-24)}, "url", false},
		{"no secret", map[string]string{"secrets": `[]`}, "secrets", false},
		{"eleven secrets", map[string]string{"secrets": `[` + strings.Repeat(`{"secret": "0123456789abcdef"},`, 10) + `{"secret": "0123456789abcdef"}]`}, "secrets", false},
		{"secrets not an array", map[string]string{"secrets": `{"secret": "0123456789abcdef"}`}, "secrets", false},
		{"a secret as a bare string", map[string]string{"secrets": `["0123456789abcdef"]`}, "secrets", false},
		{"a secret without its value", map[string]string{"secrets": `[{"fingerprint": "0123abcd"}]`}, "secrets", false},
		{"a secret that is a number", map[string]string{"secrets": `[{"secret": 1234567890123456}]`}, "secrets", false},
		{"every secret expiring", map[string]string{"secrets": `[{"secret": "0123456789abcdef", "expires_at": "2030-01-01T00:00:00Z"}]`}, "secrets", false},
		{"an expiry that is not RFC 3339", map[string]string{"secrets": `[{"secret": "0123456789abcdef", "expires_at": "2030-01-01 00:00"}, {"secret": "0123456789abcdef"}]`}, "secrets", false},
		{"a malformed fingerprint", map[string]string{"secrets": `[{"secret": "0123456789abcdef", "fingerprint": "XYZ"}]`}, "secrets", false},
		{"a malformed sealed secret", map[string]string{"secrets": `[{"secret": "sealed:v1:nothex!!:AAAA"}]`}, "secrets", false},
		{"a sealed secret of another version", map[string]string{"secrets": `[{"secret": "sealed:v2:0123abcd:AAAA"}]`}, "secrets", false},
		{"a short x-signature secret", map[string]string{"secrets": `[{"secret": "short"}]`}, "x_signature_secrets", false},
		{"an empty secret", map[string]string{"secrets": `[{"secret": ""}]`}, "x_signature_secrets", false},
		{"an x-signature secret of 1025 characters", map[string]string{"secrets": `[{"secret": "` + long + `"}]`}, "x_signature_secrets", false},
		{"an x-signature secret ending with a space", map[string]string{"secrets": `[{"secret": "0123456789abcdef "}]`}, "x_signature_secrets", false},
		{"an x-signature secret with a tab", map[string]string{"secrets": `[{"secret": "0123456789\tabcdef"}]`}, "x_signature_secrets", false},
		{"a standard-webhooks secret without whsec_", map[string]string{"scheme": "standard-webhooks"}, "standard_webhooks_secrets", false},
		{"a standard-webhooks key of 5 bytes", map[string]string{"scheme": "standard-webhooks", "secrets": `[{"secret": "whsec_c2hvcnQ="}]`}, "standard_webhooks_secrets", false},
		{"unknown scheme", map[string]string{"scheme": "hmac"}, "scheme", false},
		{"unknown format", map[string]string{"format": "xml"}, "format", false},
		{"batch of 0 events", map[string]string{"batch_max_events": "0"}, "batch_max_events", false},
		{"batch of 10001 events", map[string]string{"batch_max_events": "10001"}, "batch_max_events", false},
		{"batch of 10 bytes", map[string]string{"batch_max_bytes": "10"}, "batch_max_bytes", false},
		{"negative linger", map[string]string{"batch_linger_ms": "-1"}, "batch_linger_ms", false},
		{"linger over a minute", map[string]string{"batch_linger_ms": "60001"}, "batch_linger_ms", false},
		{"tenant with a space in front", map[string]string{"tenant_id": " acme"}, "tenant_id", false},
		{"tenant with a control character", map[string]string{"tenant_id": "ac\x01me"}, "tenant_id", false},
		{"no pattern", map[string]string{"event_types": "{}"}, "event_types", false},
		{"empty pattern", map[string]string{"event_types": `{""}`}, "event_types", false},
		{"null pattern", map[string]string{"event_types": `{NULL}`}, "event_types", false},
		{"pattern ending with a dot", map[string]string{"event_types": "{order.}"}, "event_types", false},
		{"star first", map[string]string{"event_types": "{*.created}"}, "event_types", false},
		{"double star", map[string]string{"event_types": "{a**}"}, "event_types", false},
		{"star inside", map[string]string{"event_types": "{order.*.created}"}, "event_types", false},
		{"comma in a pattern", map[string]string{"event_types": `{"a,b"}`}, "event_types", false},
		{"space in a pattern", map[string]string{"event_types": `{"order created"}`}, "event_types", false},
		{"empty aggregate types", map[string]string{"aggregate_types": "{}"}, "aggregate_types", false},
		{"empty aggregate type", map[string]string{"aggregate_types": `{""}`}, "aggregate_types", false},
		{"aggregate type with a space", map[string]string{"aggregate_types": `{"order line"}`}, "aggregate_types", false},
		{"empty tenant", map[string]string{"tenant_id": ""}, "tenant_id", true},
		{"rate limit 0", map[string]string{"rate_limit": "0"}, "rate_limit", true},
		{"negative rate limit", map[string]string{"rate_limit": "-1"}, "rate_limit", false},
		{"max in flight 0", map[string]string{"max_in_flight": "0"}, "max_in_flight", true},
		{"max in flight 10001", map[string]string{"max_in_flight": "10001"}, "max_in_flight", false},
		{"unknown state", map[string]string{"state": "gone"}, "state", false},
		{"paused without a time", map[string]string{"state": "paused"}, "paused", false},
		{"a pause time while enabled", map[string]string{"paused_at": "2026-01-01 00:00:00+00", "paused_reason": "x"}, "paused", false},
		{"disabled without a time", map[string]string{"state": "disabled", "disabled_reason": "x"}, "disabled", false},
		{"a pause reason while enabled", map[string]string{"paused_reason": "x"}, "paused", false},
		{"a disable reason while paused", map[string]string{"state": "paused", "paused_at": "2026-01-01 00:00:00+00", "disabled_reason": "x"}, "disabled", false},
		{"a disable time while enabled", map[string]string{"disabled_at": "2026-01-01 00:00:00+00", "disabled_reason": "x"}, "disabled", false},
		{"metadata an array", map[string]string{"metadata": `[1]`}, "metadata", false},
		{"metadata a string", map[string]string{"metadata": `"x"`}, "metadata", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cols := baseColumns()
			cols["id"] = "case"
			maps.Copy(cols, tt.cols)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			err = insertColumns(ctx, tx, cols)
			var pgErr *pgconn.PgError
			if want := "outbox_endpoints_" + tt.constraint + "_check"; !errors.As(err, &pgErr) || pgErr.ConstraintName != want {
				t.Errorf("plain SQL: %v, want a violation of %s", err, want)
			}
			var r endpoint.Row
			var decodeErr error
			for name, v := range cols {
				if err := r.SetColumn(name, []byte(v), false); err != nil {
					decodeErr = err
				}
			}
			if decodeErr != nil || tt.sqlOnly {
				return // the relay cannot even read it, or reads it as NULL
			}
			if err := r.Validate(nil); !errors.Is(err, endpoint.ErrInvalid) {
				t.Errorf("Validate accepts what the table refuses: %v", err)
			}
		})
	}
	// Positive control: the base row's columns decode into a row Validate accepts.
	var r endpoint.Row
	for name, v := range baseColumns() {
		if err := r.SetColumn(name, []byte(v), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Validate(nil); err != nil {
		t.Fatalf("Validate refuses the base row the table took: %v", err)
	}
}
