package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func migratedDB(t *testing.T) string {
	t.Helper()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.Up(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	return dsn
}

const insertRow = `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
	VALUES ($1, 'order', '0', 'order.changed', '{}')`

// A COMMIT whose answer was lost is settled by looking the rows up once no backend of the
// writer is left: all rows mean committed, none mean not, some mean atomicity broke.
func TestSettleFindsTheOutcome(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// prepare writes some of ids, as the lost COMMIT may have left them; it may return a
		// connection that must be gone after settle.
		prepare func(t *testing.T, dsn string, w *writer, ids []string) *pgx.Conn
		want    outcome
		wantErr string
	}{
		{"committed", func(t *testing.T, dsn string, _ *writer, ids []string) *pgx.Conn {
			insert(t, dsn, "", ids, true)
			return nil
		}, committed, ""},
		{"never reached the server", func(*testing.T, string, *writer, []string) *pgx.Conn { return nil }, aborted, ""},
		{"still open in an old backend of the writer", func(t *testing.T, dsn string, w *writer, ids []string) *pgx.Conn {
			return insert(t, dsn, w.appName, ids, false)
		}, aborted, ""},
		{"half the rows", func(t *testing.T, dsn string, _ *writer, ids []string) *pgx.Conn {
			insert(t, dsn, "", ids[:1], true)
			return nil
		}, aborted, "atomicity is broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dsn := migratedDB(t)
			cfg := defaultConfig()
			w := newWriter(0, dsn, cfg, &ledger{})
			defer w.drop()
			rec := txRecord{Before: 1}
			var ids []string
			for i := 0; i < 2; i++ {
				id := uuid.NewString()
				ids = append(ids, id)
				rec.Events = append(rec.Events, event{ID: id, Aggregate: "order/0", Seq: i + 1})
			}
			old := tt.prepare(t, dsn, w, ids)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			got, out, err := w.settle(sctx, rec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != tt.want || !got.Settled {
				t.Fatalf("outcome %d (settled %v), want %d", out, got.Settled, tt.want)
			}
			if out == committed && got.After == 0 {
				t.Fatal("committed without an After LSN")
			}
			if old != nil {
				if err := old.Ping(ctx); err == nil {
					t.Fatal("the old backend still runs: it could still commit")
				}
			}
		})
	}
}

// insert writes ids on a new connection named app, committing or leaving the transaction open.
func insert(t *testing.T, dsn, app string, ids []string, commit bool) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if app != "" {
		cfg.RuntimeParams["application_name"] = app
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := tx.Exec(ctx, insertRow, id); err != nil {
			t.Fatal(err)
		}
	}
	if commit {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}
