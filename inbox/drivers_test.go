package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx" with database/sql
	_ "github.com/lib/pq"              // registers "postgres" with database/sql

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxmigrate"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// effectFunc decides what a ProcessFunc returns after it wrote its effect (nil: success), so
// that a failure rolls back a write that did happen.
type effectFunc func(ev inbox.Event) error

// driver builds inboxes on one driver world, each with a ProcessFunc that writes one row into
// effects through the inbox's transaction.
type driver struct {
	name         string
	newHandler   func(t *testing.T, secrets []string, then effectFunc, cfg inbox.Config) *inbox.Handler
	newProcessor func(t *testing.T, then effectFunc, cfg inbox.Config) *inbox.Processor
}

// driverEnv is a database with only the inbox installed (by inboxmigrate.Migrate) and an effects
// table, and a pool to look at it with.
type driverEnv struct {
	dsn  string
	pool *pgxpool.Pool
}

func newDriverEnv(t *testing.T) driverEnv {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := inboxmigrate.Migrate(ctx, pool, inbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return driverEnv{dsn: dsn, pool: pool}
}

func (e driverEnv) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e driverEnv) effects(t *testing.T) int { return e.count(t, `SELECT count(*) FROM effects`) }
func (e driverEnv) rows(t *testing.T) int    { return e.count(t, `SELECT count(*) FROM inbox_events`) }

// drivers are pgx (a pool), and database/sql through pgx's stdlib and through lib/pq.
func (e driverEnv) drivers(t *testing.T) []driver {
	pgxFn := func(then effectFunc) inbox.ProcessFunc {
		return func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID); err != nil {
				return err
			}
			return then(ev)
		}
	}
	sqlFn := func(then effectFunc) inbox.SQLProcessFunc {
		return func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID); err != nil {
				return err
			}
			return then(ev)
		}
	}
	ds := []driver{{
		name: "pgx",
		newHandler: func(t *testing.T, secrets []string, then effectFunc, cfg inbox.Config) *inbox.Handler {
			h, err := inbox.New(e.pool, secrets, pgxFn(then), cfg)
			must(t, err)
			return h
		},
		newProcessor: func(t *testing.T, then effectFunc, cfg inbox.Config) *inbox.Processor {
			p, err := inbox.NewProcessor(e.pool, pgxFn(then), cfg)
			must(t, err)
			return p
		},
	}}
	for _, name := range []string{"pgx", "postgres"} {
		db, err := sql.Open(name, e.dsn)
		must(t, err)
		t.Cleanup(func() { db.Close() })
		label := map[string]string{"pgx": "database/sql pgx stdlib", "postgres": "database/sql lib/pq"}[name]
		ds = append(ds, driver{
			name: label,
			newHandler: func(t *testing.T, secrets []string, then effectFunc, cfg inbox.Config) *inbox.Handler {
				h, err := inbox.NewSQL(db, secrets, sqlFn(then), cfg)
				must(t, err)
				return h
			},
			newProcessor: func(t *testing.T, then effectFunc, cfg inbox.Config) *inbox.Processor {
				p, err := inbox.NewSQLProcessor(db, sqlFn(then), cfg)
				must(t, err)
				return p
			},
		})
	}
	return ds
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Over HTTP, on every driver: a delivery is applied once and its redelivery absorbed; 20
// concurrent deliveries of one event have one effect; a failing ProcessFunc leaves neither
// its effect nor the inbox row, and the retry applies it.
func TestHandlerOnEveryDriver(t *testing.T) {
	e := newDriverEnv(t)
	for _, d := range e.drivers(t) {
		t.Run(d.name, func(t *testing.T) {
			var failing sync.Map // event id → error to return
			h := d.newHandler(t, []string{"topsecret"}, func(ev inbox.Event) error {
				if err, ok := failing.Load(ev.ID.String()); ok {
					return err.(error)
				}
				return nil
			}, inbox.Config{})
			srv := httptest.NewServer(h)
			defer srv.Close()
			before := e.effects(t)

			once := newDelivery(`{"n":1}`)
			if r := post(t, srv.URL, once); r.StatusCode != 200 || r.Header.Get(inbox.HeaderDuplicate) != "" {
				t.Fatalf("first delivery: %s", r.Status)
			}
			if r := post(t, srv.URL, once); r.StatusCode != 200 || r.Header.Get(inbox.HeaderDuplicate) != "true" {
				t.Fatalf("redelivery: %s, duplicate %q", r.Status, r.Header.Get(inbox.HeaderDuplicate))
			}

			racing := newDelivery(`{"n":2}`)
			var wg sync.WaitGroup
			codes := make([]int, 20)
			for i := range codes {
				wg.Add(1)
				go func() { defer wg.Done(); codes[i] = post(t, srv.URL, racing).StatusCode }()
			}
			wg.Wait()
			for i, c := range codes {
				if c != 200 {
					t.Fatalf("concurrent delivery %d: %d", i, c)
				}
			}

			failed := newDelivery(`{"n":3}`)
			failing.Store(failed.id, errors.New("out of stock"))
			if r := post(t, srv.URL, failed); r.StatusCode != http.StatusInternalServerError {
				t.Fatalf("failing ProcessFunc: %s, want 500", r.Status)
			}
			if n := e.count(t, `SELECT count(*) FROM inbox_events WHERE id = $1`, failed.id); n != 0 {
				t.Fatalf("a rolled-back delivery left %d inbox rows", n)
			}
			if n := e.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, failed.id); n != 0 {
				t.Fatalf("a rolled-back delivery left %d effects", n)
			}
			failing.Delete(failed.id)
			if r := post(t, srv.URL, failed); r.StatusCode != 200 {
				t.Fatalf("retry after the failure: %s", r.Status)
			}

			if n := e.effects(t) - before; n != 3 {
				t.Fatalf("%d effects, want 3: one per event", n)
			}
			if s := h.Stats(); s.Processed != 3 || s.Duplicates != 20 || s.Failed != 1 {
				t.Fatalf("stats %+v, want 3 processed, 20 duplicates, 1 failed", s)
			}
			var status string
			if err := e.pool.QueryRow(context.Background(), `SELECT handler_status FROM inbox_events WHERE id = $1`, racing.id).
				Scan(&status); err != nil || status != "done" {
				t.Fatalf("inbox row of the raced event: %q, %v", status, err)
			}
		})
	}
}

// A CloudEvents batch is one transaction on every driver: the new events once, the ones seen
// skipped, and a failure rolls back all of them.
func TestBatchOnEveryDriver(t *testing.T) {
	e := newDriverEnv(t)
	for _, d := range e.drivers(t) {
		t.Run(d.name, func(t *testing.T) {
			var fail sync.Map
			h := d.newHandler(t, []string{"topsecret"}, func(ev inbox.Event) error {
				if _, ok := fail.Load(ev.ID); ok {
					return errors.New("refused")
				}
				return nil
			}, inbox.Config{})
			srv := httptest.NewServer(h)
			defer srv.Close()
			before, rowsBefore := e.effects(t), e.rows(t)
			a, b, c := uuid.New(), uuid.New(), uuid.New()

			fail.Store(c, true)
			if r := postBatch(t, srv.URL, a, b, c); r.StatusCode != http.StatusInternalServerError {
				t.Fatalf("batch with a failing event: %s, want 500", r.Status)
			}
			if n, m := e.effects(t)-before, e.rows(t)-rowsBefore; n != 0 || m != 0 {
				t.Fatalf("a rolled-back batch left %d effects and %d inbox rows", n, m)
			}
			fail.Delete(c)
			if r := postBatch(t, srv.URL, a, b, a, c); r.StatusCode != 200 {
				t.Fatalf("batch: %s", r.Status)
			}
			if r := postBatch(t, srv.URL, c, b); r.StatusCode != 200 || r.Header.Get(inbox.HeaderDuplicate) != "true" {
				t.Fatalf("batch of seen events: %s, duplicate %q", r.Status, r.Header.Get(inbox.HeaderDuplicate))
			}
			if n := e.effects(t) - before; n != 3 {
				t.Fatalf("%d effects, want 3", n)
			}
		})
	}
}

// postBatch posts a signed CloudEvents batch of ids.
func postBatch(t *testing.T, url string, ids ...uuid.UUID) *http.Response {
	t.Helper()
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/outbox-relay/default","type":"order.created",
			"aggregatetype":"order","aggregateid":"42","datacontenttype":"application/json","data":{"id":%q}}`, id, id))
	}
	d := newDelivery("[" + strings.Join(parts, ",") + "]")
	h := d.header(t)
	h.Del("X-Event-Id")
	h.Set("Content-Type", "application/cloudevents-batch+json")
	return send(t, http.MethodPost, url, h, d.body)
}

// relayMessage is a broker message as the relay publishes it: the event's headers (no
// signature, no X-Attempt) and the payload as the body.
func relayMessage(id string) (map[string][]string, []byte) {
	return map[string][]string{
		"X-Event-Id": {id}, "X-Event-Type": {"order.created"}, "X-Aggregate-Type": {"order"},
		"X-Aggregate-Id": {"42"}, "X-Event-Sequence": {"00000000000000000001"},
	}, []byte(`{"order_id":"42"}`)
}

// Without HTTP, on every driver: Process applies a message once, absorbs its redelivery and
// concurrent copies, rolls back a failure, and names a message that is not an event.
func TestProcessOnEveryDriver(t *testing.T) {
	e := newDriverEnv(t)
	ctx := context.Background()
	for _, d := range e.drivers(t) {
		t.Run(d.name, func(t *testing.T) {
			var failing sync.Map
			var seen sync.Map
			p := d.newProcessor(t, func(ev inbox.Event) error {
				seen.Store(ev.ID.String(), ev)
				if _, ok := failing.Load(ev.ID.String()); ok {
					return errors.New("out of stock")
				}
				return nil
			}, inbox.Config{})
			before := e.effects(t)

			id := uuid.NewString()
			h, body := relayMessage(id)
			if r, err := p.Process(ctx, h, body); err != nil || r != (inbox.Result{Processed: 1}) {
				t.Fatalf("first Process: %+v, %v", r, err)
			}
			v, _ := seen.Load(id)
			if ev := v.(inbox.Event); ev.Type != "order.created" || ev.AggregateID != "42" || string(ev.Payload) != string(body) {
				t.Fatalf("the ProcessFunc saw %+v", ev)
			}
			// A redelivery, its header names written in another case, as a broker may.
			lower := map[string][]string{"x-event-id": {id}, "x-event-type": {"order.created"}}
			if r, err := p.Process(ctx, lower, body); err != nil || r != (inbox.Result{Duplicates: 1}) {
				t.Fatalf("redelivery: %+v, %v", r, err)
			}

			racing := uuid.NewString()
			h, body = relayMessage(racing)
			var wg sync.WaitGroup
			results := make([]inbox.Result, 10)
			errs := make([]error, 10)
			for i := range results {
				wg.Add(1)
				go func() { defer wg.Done(); results[i], errs[i] = p.Process(ctx, h, body) }()
			}
			wg.Wait()
			processed := 0
			for i := range results {
				if errs[i] != nil {
					t.Fatalf("concurrent Process %d: %v", i, errs[i])
				}
				processed += results[i].Processed
			}
			if processed != 1 {
				t.Fatalf("%d of 10 concurrent copies applied, want 1", processed)
			}

			failed := uuid.NewString()
			failing.Store(failed, true)
			h, body = relayMessage(failed)
			if _, err := p.Process(ctx, h, body); err == nil || errors.Is(err, inbox.ErrMalformed) {
				t.Fatalf("failing ProcessFunc: %v, want its error, not ErrMalformed", err)
			}
			if n := e.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, failed); n != 0 {
				t.Fatalf("a rolled-back message left %d effects", n)
			}
			failing.Delete(failed)
			if r, err := p.Process(ctx, h, body); err != nil || r.Processed != 1 {
				t.Fatalf("redelivery after the failure: %+v, %v", r, err)
			}

			if _, err := p.Process(ctx, map[string][]string{"X-Event-Type": {"x"}}, []byte(`{}`)); !errors.Is(err, inbox.ErrMalformed) {
				t.Fatalf("a message without X-Event-Id: %v, want ErrMalformed", err)
			}
			if n := e.effects(t) - before; n != 3 {
				t.Fatalf("%d effects, want 3", n)
			}
			if s := p.Stats(); s != (inbox.Stats{Processed: 3, Duplicates: 10, Failed: 1, Rejected: 1}) {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// On database/sql, a ProcessFunc that swallows a failed statement and returns nil cannot
// commit a half-done transaction: the delivery fails and nothing remains.
func TestSQLProcessFuncSwallowingAnError(t *testing.T) {
	e := newDriverEnv(t)
	db, err := sql.Open("pgx", e.dsn)
	must(t, err)
	defer db.Close()
	h, err := inbox.NewSQL(db, []string{"topsecret"}, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, _ = tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
		_, _ = tx.ExecContext(ctx, `INSERT INTO no_such_table VALUES (1)`) // fails; the error is dropped
		return nil
	}, inbox.Config{})
	must(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	d := newDelivery(`{"n":1}`)
	if r := post(t, srv.URL, d); r.StatusCode != http.StatusInternalServerError {
		t.Fatalf("%s, want 500", r.Status)
	}
	if n, m := e.effects(t), e.rows(t); n != 0 || m != 0 {
		t.Fatalf("%d effects and %d inbox rows remain, want none", n, m)
	}
}

// A Handler whose table is missing answers 503 and logs the fix.
func TestMissingTableNamesTheFix(t *testing.T) {
	dsn := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	must(t, err)
	defer pool.Close()
	p, err := inbox.NewProcessor(pool, func(context.Context, pgx.Tx, inbox.Event) error { return nil }, inbox.Config{})
	must(t, err)
	h, body := relayMessage(uuid.NewString())
	_, err = p.Process(context.Background(), h, body)
	if inbox.StatusCode(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "outbox-relay migrate --inbox-only") {
		t.Fatalf("Process without inbox_events: %v (status %d); want 503 naming the fix", err, inbox.StatusCode(err))
	}
}
