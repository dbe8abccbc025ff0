package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

func migratedDB(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return dsn, conn
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM outbox_events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func order(id string) outbox.Event {
	return outbox.Event{AggregateType: "order", AggregateID: id, EventType: "order.created",
		Payload: map[string]any{"id": id}, DedupKey: "order.created:" + id}
}

func TestEnqueueWritesTheRow(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "7",
		EventType: "order.created", Payload: json.RawMessage(`{"total": 12.5}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var agg, typ, status string
	var payload map[string]any
	if err := conn.QueryRow(ctx, "SELECT aggregate_id, event_type, status, payload FROM outbox_events WHERE id = $1", id.String()).
		Scan(&agg, &typ, &status, &payload); err != nil {
		t.Fatal(err)
	}
	if agg != "7" || typ != "order.created" || status != "pending" || payload["total"] != 12.5 {
		t.Fatalf("row = %s %s %s %v", agg, typ, status, payload)
	}
}

func TestRolledBackEnqueueLeavesNoRow(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	tx, _ := conn.Begin(ctx)
	if _, err := outbox.Enqueue(ctx, tx, order("1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn); n != 0 {
		t.Fatalf("%d rows after rollback", n)
	}
}

func TestDuplicateKeepsTransactionUsable(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	tx, _ := conn.Begin(ctx)
	first, err := outbox.Enqueue(ctx, tx, order("1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := outbox.Enqueue(ctx, tx, order("1"))
	if !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("second enqueue: err = %v, want ErrDuplicate", err)
	}
	if again != first {
		t.Fatalf("duplicate returned id %s, want the existing %s", again, first)
	}
	// The transaction is still usable: a later statement and the commit succeed.
	if _, err := outbox.Enqueue(ctx, tx, order("2")); err != nil {
		t.Fatalf("enqueue after duplicate: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after duplicate: %v", err)
	}
	if n := count(t, conn); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}
}

func TestDatabaseSQL(t *testing.T) {
	dsn, conn := migratedDB(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := outbox.Enqueue(ctx, outbox.SQL(tx), order("9"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Enqueue(ctx, outbox.SQL(tx), order("9")); !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("database/sql duplicate: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if id == uuid.Nil || count(t, conn) != 1 {
		t.Fatalf("id %s, rows %d", id, count(t, conn))
	}
}

func TestBadInputIsRejectedBeforeTheDatabase(t *testing.T) {
	ok := order("1")
	cases := map[string]func(e *outbox.Event){
		"empty aggregate type": func(e *outbox.Event) { e.AggregateType = "" },
		"empty aggregate id":   func(e *outbox.Event) { e.AggregateID = " " },
		"empty event type":     func(e *outbox.Event) { e.EventType = "" },
		"nil payload":          func(e *outbox.Event) { e.Payload = nil },
		"raw payload not JSON": func(e *outbox.Event) { e.Payload = json.RawMessage(`{"a":`) },
		"bytes not JSON":       func(e *outbox.Event) { e.Payload = []byte("hello") },
		"unmarshalable value":  func(e *outbox.Event) { e.Payload = make(chan int) },
		"tenant with a space":  func(e *outbox.Event) { e.TenantID = "acme " },
		"tenant with a NUL":    func(e *outbox.Event) { e.TenantID = "ac\x00me" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			ev := ok
			mutate(&ev)
			// A querier that fails the test if reached proves nothing hits the database.
			_, err := outbox.Enqueue(context.Background(), unreachable{t}, ev)
			if !errors.Is(err, outbox.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

type unreachable struct{ t *testing.T }

func (u unreachable) QueryRow(context.Context, string, ...any) pgx.Row {
	u.t.Fatal("invalid input reached the database")
	return nil
}

func TestTraceParentIsStoredForTheRelay(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := order("5")
	ev.TraceParent = tp
	ev.Headers = map[string]string{"tracestate": "congo=t61rcWkgMzE"}
	id, err := outbox.Enqueue(ctx, conn, ev)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := conn.QueryRow(ctx, "SELECT headers FROM outbox_events WHERE id = $1", id.String()).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got["traceparent"] != tp || got["tracestate"] != "congo=t61rcWkgMzE" {
		t.Fatalf("headers = %v", got)
	}
	bad := order("6")
	bad.TraceParent = "not-a-trace"
	if _, err := outbox.Enqueue(ctx, unreachable{t}, bad); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("bad traceparent: %v", err)
	}
}

// An event's tenant is written with it, through every form of the insert (with and without
// headers, pgx and database/sql); without one the column stays NULL.
func TestTenantIsStoredForTheRelay(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tt := range []struct {
		name    string
		q       outbox.Querier
		tenant  string
		headers map[string]string
	}{
		{"tenant", conn, "acme", nil},
		{"tenant and headers", conn, "globex", map[string]string{"X-Region": "eu"}},
		{"database/sql", outbox.SQL(db), "initech", nil},
		{"no tenant", conn, "", map[string]string{"X-Region": "eu"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := order(tt.name)
			ev.TenantID, ev.Headers = tt.tenant, tt.headers
			id, err := outbox.Enqueue(ctx, tt.q, ev)
			if err != nil {
				t.Fatal(err)
			}
			var tenant *string
			var headers map[string]string
			if err := conn.QueryRow(ctx, "SELECT tenant_id, headers FROM outbox_events WHERE id = $1", id.String()).Scan(&tenant, &headers); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.tenant == "" && tenant != nil:
				t.Fatalf("tenant_id = %q, want NULL", *tenant)
			case tt.tenant != "" && (tenant == nil || *tenant != tt.tenant):
				t.Fatalf("tenant_id = %v, want %q", tenant, tt.tenant)
			case tt.headers != nil && headers["X-Region"] != "eu":
				t.Fatalf("headers = %v", headers)
			}
		})
	}
}

// exampleDB creates an empty database on the test cluster for an example (which has no
// testing.T) and returns its DSN; in your code this is your database's DSN.
func exampleDB() string {
	c := pgtest.SharedCluster()
	if c == nil {
		log.Fatal("no test cluster: pgtest.Main runs in TestMain")
	}
	name, err := c.CreateDatabase(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	return c.DSN(name)
}

// Schema("app") writes into app.outbox_events whatever the search_path, and a dedup key is
// looked up there too; Prune with Schema "app" deletes only app's rows. A same-named table in
// public (on the search_path) is never touched.
func TestEnqueueAndPruneInANamedSchema(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: "app"}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE public.outbox_events (LIKE app.outbox_events INCLUDING ALL)`); err != nil {
		t.Fatal(err)
	}
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: map[string]int{"n": 1},
		DedupKey: "order.created:1"}
	first, err := outbox.Schema("app").Enqueue(ctx, conn, ev)
	if err != nil {
		t.Fatal(err)
	}
	again, err := outbox.Schema("app").Enqueue(ctx, conn, ev)
	if !errors.Is(err, outbox.ErrDuplicate) || again != first {
		t.Fatalf("second enqueue of the key: %v, %v; want ErrDuplicate with %v", again, err, first)
	}
	// The positive control: the unqualified Enqueue follows the search_path, into the decoy.
	if _, err := outbox.Enqueue(ctx, conn, ev); err != nil {
		t.Fatal(err)
	}
	count := func(table string) (n int) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, p := count("app.outbox_events"), count("public.outbox_events"); a != 1 || p != 1 {
		t.Fatalf("app has %d rows, public %d; want 1 each", a, p)
	}
	if _, err := conn.Exec(ctx, `UPDATE app.outbox_events SET status = 'done', processed_at = now() - interval '2 hours';
		UPDATE public.outbox_events SET status = 'done', processed_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE app.outbox_events SET available_at = now() - interval '3 hours';
		UPDATE public.outbox_events SET available_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	res, err := outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: time.Hour, Schema: "app"})
	if err != nil || res.Deleted != 1 {
		t.Fatalf("prune app: %+v, %v; want 1 deleted", res, err)
	}
	if a, p := count("app.outbox_events"), count("public.outbox_events"); a != 0 || p != 1 {
		t.Fatalf("after pruning app: app has %d rows, public %d; want 0 and 1", a, p)
	}
	_, err = outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: time.Hour, Schema: "nope"})
	if err == nil || !strings.Contains(err.Error(), "does not exist in schema \"nope\"") {
		t.Fatalf("prune of a schema without the table: %v; want the schema named", err)
	}
}

// exampleDSN is exampleDB, migrated.
func exampleDSN() string {
	dsn := exampleDB()
	if _, err := migrations.Up(context.Background(), dsn); err != nil {
		log.Fatal(err)
	}
	return dsn
}

// A producer that opts in to validation has a payload its type's schema refuses refused with
// ErrInvalid and the JSON pointer at fault, nothing written and its transaction usable; a valid
// one is written; the zero Producer checks nothing beyond JSON.
func TestProducerValidatesPayloadsAgainstTheCatalog(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, _, err := (catalog.Catalog{}).Put(ctx, pool, catalog.Type{Name: "order.created",
		Schema: json.RawMessage(`{"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}}`)}); err != nil {
		t.Fatal(err)
	}
	p := outbox.Producer{Validator: catalog.NewValidator(pool, catalog.ValidatorConfig{})}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: map[string]any{"order_id": 1}}
	_, err = p.Enqueue(ctx, tx, ev)
	var pe *catalog.PayloadError
	if !errors.Is(err, outbox.ErrInvalid) || !errors.As(err, &pe) || pe.Pointer != "/order_id" {
		t.Fatalf("a payload the schema refuses: %v", err)
	}
	if _, err := outbox.Enqueue(ctx, tx, ev); err != nil {
		t.Fatalf("without a validator the same event is written: %v", err)
	}
	ev.Payload = map[string]any{"order_id": "o-1"}
	if _, err := p.Enqueue(ctx, tx, ev); err != nil {
		t.Fatalf("a valid payload: %v", err)
	}
	ev.EventType = "ordr.created"
	if _, err := p.Enqueue(ctx, tx, ev); !errors.Is(err, catalog.ErrUnknownType) || !strings.Contains(err.Error(), "did you mean order.created?") {
		t.Fatalf("a type not in the catalog: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn); n != 2 {
		t.Fatalf("%d events written, want the two accepted", n)
	}
}
