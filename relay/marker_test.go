package relay

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
)

// enqueue commits one pending row through q and returns its id.
func enqueue(t *testing.T, q outbox.Querier, agg string) string {
	t.Helper()
	id, err := outbox.Enqueue(context.Background(), q, outbox.Event{AggregateType: "order", AggregateID: agg,
		EventType: "order.changed", Payload: map[string]int{"seq": 1}})
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

func (e *env) status(id string) string {
	e.t.Helper()
	var s string
	if err := e.pool.QueryRow(context.Background(), `SELECT status FROM outbox_events WHERE id = $1`, id).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// runMarker runs m until the test ends (or stop is called), and waits for it.
func runMarker(t *testing.T, m *pgstore.Marker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// The marker keeps at most Max marks waiting; beyond them marks are dropped (the rows stay
// pending). The dropped rows are markable: a marker without the limit marks them.
func TestMarkerKeepsAtMostMaxMarksWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, enqueue(t, e.pool, "max"))
	}
	m := pgstore.NewMarker(e.pool, pgstore.MarkerConfig{Max: 3, Interval: time.Hour})
	for _, id := range ids {
		m.Done(id, "", 0)
	}
	runMarker(t, m)() // stopping flushes what waits
	for i, id := range ids {
		want := "done"
		if i >= 3 {
			want = "pending"
		}
		if got := e.status(id); got != want {
			t.Errorf("row %d of 5 with Max 3: %s, want %s", i+1, got, want)
		}
	}
	// Positive control: the same rows, under the default limit.
	all := pgstore.NewMarker(e.pool, pgstore.MarkerConfig{Interval: time.Hour})
	for _, id := range ids[3:] {
		all.Done(id, "", 0)
	}
	runMarker(t, all)()
	for _, id := range ids[3:] {
		if got := e.status(id); got != "done" {
			t.Fatalf("row %s is %s under the default limit: the rows above could not be marked at all", id, got)
		}
	}
}

// markTracer records the rows each mark statement updated.
type markTracer struct {
	mu      sync.Mutex
	updated []int64
}

type markKey struct{}

func (tr *markTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "UPDATE outbox_events o SET status = 'done'") {
		return context.WithValue(ctx, markKey{}, true)
	}
	return ctx
}

func (tr *markTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(markKey{}) == nil || d.Err != nil {
		return
	}
	tr.mu.Lock()
	tr.updated = append(tr.updated, d.CommandTag.RowsAffected())
	tr.mu.Unlock()
}

func (tr *markTracer) marks() []int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]int64(nil), tr.updated...)
}

// A delivered row can still be invisible to the marker's session just after its commit: the
// batch that missed it is marked again at a later flush, even when nothing else was delivered
// meanwhile, and the row ends up done.
func TestMarkerMarksAgainARowThatWasNotYetVisible(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &markTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	visible := enqueue(t, e.pool, "late")
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	invisible := enqueue(t, tx, "late") // not committed yet: the marker cannot see it

	// Two marks fill the batch and flush at once; the next flush is the periodic one, after the
	// commit below.
	m := pgstore.NewMarker(pool, pgstore.MarkerConfig{Batch: 2, Interval: 3 * time.Second})
	m.Done(visible, "", 0)
	m.Done(invisible, "", 0)
	runMarker(t, m)
	waitFor(t, 10*time.Second, "a mark that found only the visible row", func() bool { return len(tracer.marks()) > 0 })
	if ms := tracer.marks(); ms[0] != 1 {
		t.Fatalf("the first mark updated %d rows, want only the visible one", ms[0])
	}
	if got := e.status(visible); got != "done" {
		t.Fatalf("the visible row is %s after its mark", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the row that was not yet visible marked done", func() bool { return e.status(invisible) == "done" })
}

// Marks that waited (the marker fell behind, or the database was away) are written in
// statements of at most Batch rows: a join of tens of thousands of ids is planned as a scan of
// the whole table, which on a large table makes the marks fall further behind.
func TestMarkerWritesABacklogInBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for i := 0; i < 2500; i++ {
			ids = append(ids, enqueue(t, tx, "backlog"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &markTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m := pgstore.NewMarker(pool, pgstore.MarkerConfig{Batch: 1000, Interval: time.Hour})
	for _, id := range ids {
		m.Done(id, "", 0) // nothing runs the marker yet: they wait, as behind a slow database
	}
	runMarker(t, m)() // stopping flushes what waits
	if got := tracer.marks(); len(got) != 3 || got[0]+got[1]+got[2] != 2500 || max(got[0], got[1], got[2]) > 1000 {
		t.Fatalf("marks updated %v rows per statement, want 2500 in 3 statements of at most 1000", got)
	}
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'done'`).Scan(&n); err != nil || n != 2500 {
		t.Fatalf("%d of 2500 rows done (%v)", n, err)
	}
}
