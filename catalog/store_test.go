package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

const orderSchema = `{"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}}`

func TestPutGetListDelete(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	var c catalog.Catalog
	created := catalog.Type{Name: "order.created", Description: "An order was placed.",
		Schema: json.RawMessage(orderSchema), Example: json.RawMessage(`{"order_id": "o-1"}`)}
	got, isNew, err := c.Put(ctx, pool, created)
	if err != nil || !isNew {
		t.Fatalf("Put = %v, new %v", err, isNew)
	}
	if got.Name != "order.created" || got.CreatedAt.IsZero() || !strings.Contains(string(got.Schema), `"required": ["order_id"]`) {
		t.Fatalf("Put returned %+v (schema %s)", got, got.Schema)
	}
	if _, isNew, err := c.Put(ctx, pool, created); err != nil || isNew {
		t.Fatalf("the same Put again: new %v, %v", isNew, err)
	}
	created.Description = "An order was placed by a customer."
	if got, isNew, err := c.Put(ctx, pool, created); err != nil || isNew || got.Description != created.Description {
		t.Fatalf("a changed Put: new %v, %+v, %v", isNew, got, err)
	}
	old := catalog.Type{Name: "order.placed", Deprecated: true, ReplacedBy: "order.created"}
	if _, _, err := c.Put(ctx, pool, old); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Put(ctx, pool, catalog.Type{Name: "order.x", Deprecated: true, ReplacedBy: "order.nope"}); !errors.Is(err, catalog.ErrInvalid) ||
		!strings.Contains(err.Error(), `replaced_by "order.nope" is not in the catalog`) {
		t.Fatalf("a replacement not in the catalog: %v", err)
	}
	list, err := c.List(ctx, pool)
	if err != nil || len(list) != 2 || list[0].Name != "order.created" || list[1].ReplacedBy != "order.created" || list[1].Schema != nil {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if g, err := c.Get(ctx, pool, "order.placed"); err != nil || !g.Deprecated || g.Example != nil {
		t.Fatalf("Get = %+v, %v", g, err)
	}
	if _, err := c.Get(ctx, pool, "order.gone"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("Get of a missing type: %v", err)
	}
	if err := c.Delete(ctx, pool, "order.placed"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, pool, "order.placed"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("Delete twice: %v", err)
	}
	// A refusal writes nothing and leaves the caller's transaction usable.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, _, err := c.Put(ctx, tx, catalog.Type{Name: "bad", Schema: json.RawMessage(`{"type": 5}`)}); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("a schema that does not compile: %v", err)
	}
	if l, err := c.List(ctx, tx); err != nil || len(l) != 1 {
		t.Fatalf("after a refusal, the transaction lists %d types: %v", len(l), err)
	}
}

// The table's CHECKs agree with Check: SQL cannot store what the Go API refuses as a name.
func TestTheTableRefusesWhatCheckRefuses(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	for _, name := range []string{"", "order.*", "order created", ".order", "order.", "a..b", "a,b"} {
		if _, err := catalog.Check(catalog.Type{Name: name}); err == nil {
			t.Errorf("Check accepted %q", name)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO outbox_event_types (name) VALUES ($1)", name); err == nil {
			t.Errorf("the table accepted %q", name)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO outbox_event_types (name) VALUES ('order.created')"); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO outbox_event_types (name, replaced_by) VALUES ('order.old', 'order.created')"); err == nil {
		t.Error("the table accepted a replaced_by of a type not deprecated")
	}
}

// Against the database: an empty catalog checks nothing; one that is not empty refuses a
// pattern matching nothing and warns about deprecated types; a database migrated before the
// table exists is an empty catalog, and the check does not abort the caller's transaction.
func TestCheckPatternsInTheDatabase(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	var c catalog.Catalog
	if w, err := c.CheckPatterns(ctx, pool, []string{"ordr.created"}); err != nil || w != nil {
		t.Fatalf("empty catalog: %q, %v", w, err)
	}
	for _, ty := range []catalog.Type{{Name: "order.created"}, {Name: "order.cancelled", Deprecated: true}} {
		if _, _, err := c.Put(ctx, pool, ty); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CheckPatterns(ctx, pool, []string{"ordr.created"}); !errors.Is(err, catalog.ErrUnknownType) ||
		!strings.Contains(err.Error(), "did you mean order.created?") {
		t.Fatalf("a typo: %v", err)
	}
	if w, err := c.CheckPatterns(ctx, pool, []string{"order.cancelled"}); err != nil || len(w) != 1 {
		t.Fatalf("deprecated only: %q, %v", w, err)
	}
	if w, err := c.CheckPatterns(ctx, pool, []string{"order.*"}); err != nil || len(w) != 0 {
		t.Fatalf("positive control: %q, %v", w, err)
	}

	// A database migrated before 16, as far as the catalog can tell.
	old := migrated(t)
	if _, err := old.Exec(ctx, "DROP TABLE outbox_event_types"); err != nil {
		t.Fatal(err)
	}
	tx, err := old.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if w, err := c.CheckPatterns(ctx, tx, []string{"anything"}); err != nil || w != nil {
		t.Fatalf("before migration 16: %q, %v", w, err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the transaction is not usable after the check: %v", err)
	}
	if _, err := (catalog.Catalog{}).List(ctx, tx); err == nil || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("List before migration 16 does not name the fix: %v", err)
	}
}

const file = `
event_types:
  - name: order.created
    description: An order was placed.
    schema:
      type: object
      required: [order_id, placed_at]
      properties:
        order_id: {type: string}
        placed_at: {type: string}
        total: {type: number}
    example: {order_id: o-1, placed_at: 2024-05-01, total: 12.50}
  - name: order.canceled
  - name: order.cancelled
    deprecated: true
    replaced_by: order.canceled
`

func TestParseFile(t *testing.T) {
	types, err := catalog.ParseFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 3 || string(types[0].Example) != `{"order_id":"o-1","placed_at":"2024-05-01","total":12.50}` {
		t.Fatalf("parsed %d types, example %s", len(types), types[0].Example)
	}
	if !strings.Contains(string(types[0].Schema), `"required":["order_id","placed_at"]`) || types[1].Schema != nil {
		t.Fatalf("schemas %s, %s", types[0].Schema, types[1].Schema)
	}
	for _, tt := range []struct{ yaml, reason string }{
		{"event_types:\n  - name: a.b\n    descripton: typo\n", "line 3: field descripton not found"},
		{"event_types: []\n", "no event_types"},
		{"event_types:\n  - name: a.b\n  - name: a.b\n", "listed twice"},
		{"event_types:\n  - name: a.b\n    deprecated: true\n    replaced_by: c.d\n", "replaced_by c.d is not in the file"},
		{"event_types:\n  - name: a.b\n    schema: {type: object}\n    example: [1]\n", "event type #1: invalid event type a.b: the example does not match the schema"},
		{"event_types:\n  - name: a.*\n", "is a pattern"},
	} {
		if _, err := catalog.ParseFile([]byte(tt.yaml)); !errors.Is(err, catalog.ErrFile) || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%q: %v, want ErrFile saying %q", tt.yaml, err, tt.reason)
		}
	}
}

func TestSync(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	var c catalog.Catalog
	if _, _, err := c.Put(ctx, pool, catalog.Type{Name: "legacy.ping"}); err != nil {
		t.Fatal(err)
	}
	types, err := catalog.ParseFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	dry, err := c.Sync(ctx, pool, types, catalog.SyncOptions{DryRun: true, Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.SyncReport{Created: []string{"order.canceled", "order.cancelled", "order.created"}, Removed: []string{"legacy.ping"}}
	if !reflect.DeepEqual(dry, want) {
		t.Fatalf("dry run: %+v, want %+v", dry, want)
	}
	if l, _ := c.List(ctx, pool); len(l) != 1 {
		t.Fatalf("a dry run wrote: %d types", len(l))
	}
	rep, err := c.Sync(ctx, pool, types, catalog.SyncOptions{})
	want = catalog.SyncReport{Created: want.Created, Unlisted: []string{"legacy.ping"}}
	if err != nil || !reflect.DeepEqual(rep, want) {
		t.Fatalf("sync: %+v, %v; want %+v", rep, err, want)
	}
	types[1].Description = "An order was canceled."
	rep, err = c.Sync(ctx, pool, types, catalog.SyncOptions{Prune: true})
	want = catalog.SyncReport{Updated: []string{"order.canceled"}, Unchanged: []string{"order.cancelled", "order.created"}, Removed: []string{"legacy.ping"}}
	if err != nil || !reflect.DeepEqual(rep, want) {
		t.Fatalf("second sync: %+v, %v; want %+v", rep, err, want)
	}
	if l, _ := c.List(ctx, pool); len(l) != 3 || l[0].Description != "An order was canceled." {
		t.Fatalf("after the sync: %+v", l)
	}
	// A replacement that a prune would remove is refused before anything is written.
	if _, err := c.Sync(ctx, pool, types[2:], catalog.SyncOptions{Prune: true}); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("a sync that prunes a replacement: %v", err)
	}
}

// A Validator refuses a payload with the pointer at fault, an unknown type with the nearest
// names, sees a type added at once and a changed schema after MaxAge, and lets everything
// through while the catalog is empty.
func TestValidator(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	v := catalog.NewValidator(pool, catalog.ValidatorConfig{MaxAge: time.Hour})
	if err := v.ValidatePayload(ctx, "anything", []byte(`1`)); err != nil {
		t.Fatalf("empty catalog: %v", err)
	}
	var c catalog.Catalog
	if _, _, err := c.Put(ctx, pool, catalog.Type{Name: "order.created", Schema: json.RawMessage(orderSchema)}); err != nil {
		t.Fatal(err)
	}
	// The catalog read while it was empty is an hour fresh, yet the unknown type makes the
	// validator read it again (a second after its last read).
	waitFor(t, func() bool { return v.ValidatePayload(ctx, "order.created", []byte(`{"order_id": 1}`)) != nil })
	err := v.ValidatePayload(ctx, "order.created", []byte(`{"order_id": 1}`))
	var pe *catalog.PayloadError
	if !errors.As(err, &pe) || pe.Pointer != "/order_id" || pe.EventType != "order.created" || !errors.Is(err, catalog.ErrPayload) {
		t.Fatalf("a bad payload: %#v", err)
	}
	if err := v.ValidatePayload(ctx, "order.created", []byte(`{"order_id": "o-1"}`)); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	if err := v.ValidatePayload(ctx, "ordr.created", []byte(`{}`)); !errors.Is(err, catalog.ErrUnknownType) ||
		!strings.Contains(err.Error(), "did you mean order.created?") {
		t.Fatalf("an unknown type: %v", err)
	}
	// A schema changed in the database is used once MaxAge has passed (or at Refresh).
	if _, _, err := c.Put(ctx, pool, catalog.Type{Name: "order.created"}); err != nil {
		t.Fatal(err)
	}
	if err := v.ValidatePayload(ctx, "order.created", []byte(`{"order_id": 1}`)); err == nil {
		t.Fatal("the schema changed within MaxAge took effect: the cache is not used")
	}
	if err := v.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.ValidatePayload(ctx, "order.created", []byte(`{"order_id": 1}`)); err != nil {
		t.Fatalf("after Refresh, the type without a schema: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
