package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// versionsOf lists pipeline's versions as "id@lsn" ("id@lsn-" for a removal), after
// EndpointVersions, with whether it was bootstrapped.
func versionsOf(t *testing.T, pool *pgxpool.Pool, pipeline string) (bool, []string) {
	t.Helper()
	boot, vs, err := state.EndpointVersions(context.Background(), pool, "public", pipeline)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		s := fmt.Sprintf("%s@%s", v.ID, v.LSN)
		if v.Row == nil {
			s += "-"
		}
		out = append(out, s)
	}
	return boot, out
}

func record(t *testing.T, pool *pgxpool.Pool, pipeline, id string, lsn pglogrepl.LSN, row string) {
	t.Helper()
	var b []byte
	if row != "" {
		b = []byte(row)
	}
	if err := state.RecordEndpointVersion(context.Background(), pool, "public", pipeline, id, lsn, b); err != nil {
		t.Fatal(err)
	}
}

// Versions read back in LSN order, then by id, each row as it was recorded (a removal as nil),
// per pipeline; recording a change twice keeps the first; the marker's id is refused.
func TestEndpointVersionsRecordAndRead(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	record(t, pool, "p", "ep_b", 0x200, `{"id": "ep_b"}`)
	record(t, pool, "p", "ep_a", 0x200, `{"id": "ep_a"}`)
	record(t, pool, "p", "ep_a", 0x100, `{"id": "ep_a", "url": "https://a.example/"}`)
	record(t, pool, "p", "ep_a", 0x300, "")
	record(t, pool, "p", "ep_a", 0x300, `{"id": "ep_a"}`) // the same change again: no effect
	record(t, pool, "q", "ep_a", 0x150, `{"id": "ep_a"}`)
	boot, got := versionsOf(t, pool, "p")
	if want := []string{"ep_a@0/100", "ep_a@0/200", "ep_b@0/200", "ep_a@0/300-"}; boot || !slices.Equal(got, want) {
		t.Fatalf("versions %v (bootstrapped %v), want %v, not bootstrapped", got, boot, want)
	}
	_, vs, err := state.EndpointVersions(context.Background(), pool, "public", "p")
	if err != nil {
		t.Fatal(err)
	}
	if string(vs[0].Row) != `{"id": "ep_a", "url": "https://a.example/"}` {
		t.Fatalf("row %s", vs[0].Row)
	}
	if err := state.RecordEndpointVersion(context.Background(), pool, "public", "p", "", 0x400, nil); !errors.Is(err, state.ErrMarkerID) {
		t.Fatalf("an empty id: %v, want ErrMarkerID", err)
	}
}

const epSecrets = `'[{"secret": "0123456789abcdef0123"}]'`

func addEndpoint(t *testing.T, db state.DB, id string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `INSERT INTO outbox_endpoints (id, url, secrets) VALUES ($1, 'https://'||$1||'.example/', `+
		epSecrets+`)`, id); err != nil {
		t.Fatal(err)
	}
}

// A bootstrap records every endpoint of the transaction's snapshot (not one committed after
// it), with the marker; another at the same or an earlier LSN, 0/0 included, changes nothing;
// one at a later LSN (a recreated slot) supersedes every version before it.
func TestBootstrapEndpointVersions(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	addEndpoint(t, pool, "ep_a")
	addEndpoint(t, pool, "ep_b")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	addEndpoint(t, pool, "ep_c") // after the snapshot
	if boot, _ := versionsOf(t, pool, "p"); boot {
		t.Fatal("bootstrapped before any bootstrap")
	}
	if err := state.BootstrapEndpointVersions(ctx, tx, "public", "p", 0x100); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"ep_a@0/100", "ep_b@0/100"}
	if boot, got := versionsOf(t, pool, "p"); !boot || !slices.Equal(got, want) {
		t.Fatalf("after the bootstrap: %v (bootstrapped %v), want %v", got, boot, want)
	}
	_, vs, err := state.EndpointVersions(ctx, pool, "public", "p")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(vs[0].Row), `"url": "https://ep_a.example/"`) {
		t.Fatalf("bootstrap row %s", vs[0].Row)
	}
	for _, lsn := range []pglogrepl.LSN{0, 0x100, 0x80} {
		if err := state.BootstrapEndpointVersions(ctx, pool, "public", "p", lsn); err != nil {
			t.Fatal(err)
		}
		if _, got := versionsOf(t, pool, "p"); !slices.Equal(got, want) {
			t.Fatalf("a bootstrap at %s after one at 0/100 changed the versions: %v", lsn, got)
		}
	}
	record(t, pool, "p", "ep_a", 0x180, "")
	if _, err := pool.Exec(ctx, `DELETE FROM outbox_endpoints WHERE id = 'ep_a'`); err != nil {
		t.Fatal(err)
	}
	if err := state.BootstrapEndpointVersions(ctx, pool, "public", "p", 0x200); err != nil {
		t.Fatal(err)
	}
	record(t, pool, "p", "ep_d", 0x300, `{"id": "ep_d"}`)
	if boot, got := versionsOf(t, pool, "p"); !boot || !slices.Equal(got, []string{"ep_b@0/200", "ep_c@0/200", "ep_d@0/300"}) {
		t.Fatalf("after a later bootstrap: %v (bootstrapped %v)", got, boot)
	}
	// Another pipeline bootstraps on its own, at 0/0 (a slot that existed before).
	if err := state.BootstrapEndpointVersions(ctx, pool, "public", "q", 0); err != nil {
		t.Fatal(err)
	}
	if boot, got := versionsOf(t, pool, "q"); !boot || !slices.Equal(got, []string{"ep_b@0/0", "ep_c@0/0"}) {
		t.Fatalf("pipeline q: %v (bootstrapped %v)", got, boot)
	}
}

// allVersions lists every row of outbox_endpoint_versions, marker included, as
// "pipeline:id@lsn" ("-" for a NULL row).
func allVersions(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pipeline || ':' || endpoint_id || '@' || lsn::text ||
		CASE WHEN row IS NULL THEN '-' ELSE '' END FROM outbox_endpoint_versions ORDER BY pipeline, lsn, endpoint_id`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Pruning keeps, per endpoint, the newest version at or below the confirmed position and
// everything above it, except a removal at or below it that is the endpoint's latest (nothing
// can route to it again); it keeps the bootstrap's marker, drops what a later bootstrap
// superseded, and leaves other pipelines alone.
func TestPruneEndpointVersionsKeepsTheNewestAtOrBelowConfirmed(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	if err := state.BootstrapEndpointVersions(ctx, pool, "public", "p", 0x1); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		id  string
		lsn pglogrepl.LSN
		row string
	}{
		{"a", 0x10, "{}"}, {"a", 0x20, "{}"}, {"a", 0x30, "{}"}, // 0x10 superseded at or below 0x25
		{"b", 0x10, "{}"}, {"b", 0x20, ""}, // removed, and that is its latest: both go
		{"c", 0x10, "{}"}, {"c", 0x20, ""}, {"c", 0x30, "{}"}, // the removal stays: c comes back after it
		{"d", 0x30, "{}"}, {"d", 0x40, ""}, // all above confirmed
		{"e", 0x15, "{}"}, {"e", 0x25, "{}"}, // exactly at confirmed
		{"f", 0x05, "{}"}, // alone
	} {
		record(t, pool, "p", v.id, v.lsn, v.row)
	}
	record(t, pool, "other", "a", 0x10, "{}")
	record(t, pool, "other", "a", 0x20, "{}")
	n, err := state.PruneEndpointVersions(ctx, pool, "public", "p", 0x25)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"other:a@0/10", "other:a@0/20",
		"p:@0/1-", "p:f@0/5", "p:a@0/20", "p:c@0/20-", "p:a@0/30", "p:c@0/30", "p:d@0/30", "p:e@0/25", "p:d@0/40-"}
	slices.Sort(want)
	got := allVersions(t, pool)
	slices.Sort(got)
	if !slices.Equal(got, want) || n != 5 {
		t.Fatalf("after pruning at 0/25 (%d deleted, want 5):\n got %v\nwant %v", n, got, want)
	}
	if n, err := state.PruneEndpointVersions(ctx, pool, "public", "p", 0x25); err != nil || n != 0 {
		t.Fatalf("pruning again: %d deleted, %v", n, err)
	}
	// A later bootstrap (a recreated slot) leaves nothing before it, its predecessor's marker
	// included, whatever the confirmed position.
	if err := state.BootstrapEndpointVersions(ctx, pool, "public", "p", 0x50); err != nil {
		t.Fatal(err)
	}
	if _, err := state.PruneEndpointVersions(ctx, pool, "public", "p", 0); err != nil {
		t.Fatal(err)
	}
	if got := allVersions(t, pool); !slices.Equal(got, []string{"other:a@0/10", "other:a@0/20", "p:@0/50-"}) {
		t.Fatalf("after a bootstrap at 0/50 (no endpoints in the table): %v", got)
	}
}

// counting is a state.DB that counts the statements it passes to the pool.
type counting struct {
	*pgxpool.Pool
	n int
}

func (c *counting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n++
	return c.Pool.Exec(ctx, sql, args...)
}

func (c *counting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n++
	return c.Pool.Query(ctx, sql, args...)
}

// A thousand lanes' status is saved in one statement and read back as saved, zero times and an
// empty error as NULL; saving again updates them, the last row of a pair in one call wins, and
// a forgotten lane is gone.
func TestSaveEndpointStatusOneStatement(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 6, 0, 0, 123456000, time.UTC)
	rows := make([]state.EndpointStatus, 1000)
	for i := range rows {
		rows[i] = state.EndpointStatus{Pipeline: "p", EndpointID: fmt.Sprintf("ep_%04d", i), Undelivered: int64(i),
			FailuresInRow: i % 7}
		if i%2 == 0 {
			rows[i].OldestUndelivered, rows[i].LastSuccess = at, at.Add(time.Second)
			rows[i].LastError, rows[i].LastErrorAt = fmt.Sprintf("503 from %d", i), at.Add(2*time.Second)
		}
	}
	db := &counting{Pool: pool}
	if err := state.SaveEndpointStatus(ctx, db, "public", rows); err != nil {
		t.Fatal(err)
	}
	if db.n != 1 {
		t.Fatalf("%d statements for 1,000 rows, want 1", db.n)
	}
	got, err := state.EndpointStatuses(ctx, pool, "public")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows read back, want %d", len(got), len(rows))
	}
	for i, g := range got {
		if g.UpdatedAt.IsZero() {
			t.Fatalf("row %d has no updated_at", i)
		}
		g.UpdatedAt = time.Time{}
		if !sameStatus(g, rows[i]) {
			t.Fatalf("row %d read back as %+v, saved %+v", i, g, rows[i])
		}
	}
	var nulls int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoint_status WHERE last_error IS NULL
		AND oldest_undelivered_at IS NULL AND last_success_at IS NULL AND last_error_at IS NULL`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 500 {
		t.Fatalf("%d rows with NULLs, want 500", nulls)
	}
	update := []state.EndpointStatus{
		{Pipeline: "p", EndpointID: "ep_0001", Undelivered: 99},
		{Pipeline: "p", EndpointID: "ep_0000", Undelivered: 5, LastError: "first"},
		{Pipeline: "p", EndpointID: "ep_0000", Undelivered: 6, LastError: "last"},
		{Pipeline: "q", EndpointID: "ep_0000", Undelivered: 7},
	}
	if err := state.SaveEndpointStatus(ctx, pool, "public", update); err != nil {
		t.Fatal(err)
	}
	if err := state.ForgetEndpointStatus(ctx, pool, "public", "p", "ep_0002"); err != nil {
		t.Fatal(err)
	}
	if got, err = state.EndpointStatuses(ctx, pool, "public"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got[0].EndpointID != "ep_0000" || got[0].Undelivered != 6 || got[0].LastError != "last" ||
		!got[0].OldestUndelivered.IsZero() || got[1].Undelivered != 99 || got[2].EndpointID != "ep_0003" ||
		got[999].Pipeline != "q" || got[999].Undelivered != 7 {
		t.Fatalf("after the update: first %+v, %+v, %+v, last %+v", got[0], got[1], got[2], got[999])
	}
	if err := state.SaveEndpointStatus(ctx, db, "public", nil); err != nil || db.n != 1 {
		t.Fatalf("saving nothing: %v, %d statements", err, db.n-1)
	}
}

func sameStatus(a, b state.EndpointStatus) bool {
	return a.Pipeline == b.Pipeline && a.EndpointID == b.EndpointID && a.Undelivered == b.Undelivered &&
		a.OldestUndelivered.Equal(b.OldestUndelivered) && a.LastSuccess.Equal(b.LastSuccess) &&
		a.LastError == b.LastError && a.LastErrorAt.Equal(b.LastErrorAt) && a.FailuresInRow == b.FailuresInRow
}

// A bootstrap copied from a standby (here: a snapshot on another connection of the same
// database) records the snapshot's endpoints with the marker on the primary's transaction, and
// nothing when the pipeline has a bootstrap at that LSN or later.
func TestCopyEndpointVersions(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	addEndpoint(t, pool, "ep_a")
	sconn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(ctx)
	stx, err := sconn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer stx.Rollback(ctx)
	if _, err := stx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	addEndpoint(t, pool, "ep_b") // after the snapshot
	copyTo := func(lsn pglogrepl.LSN) {
		t.Helper()
		ptx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ptx.Rollback(ctx)
		if err := state.CopyEndpointVersions(ctx, stx, ptx, "public", "p", lsn); err != nil {
			t.Fatal(err)
		}
		if err := ptx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	copyTo(0x100)
	if boot, got := versionsOf(t, pool, "p"); !boot || !slices.Equal(got, []string{"ep_a@0/100"}) {
		t.Fatalf("after the copy: %v (bootstrapped %v), want ep_a@0/100", got, boot)
	}
	copyTo(0x100)
	copyTo(0)
	if got := allVersions(t, pool); !slices.Equal(got, []string{"p:@0/100-", "p:ep_a@0/100"}) {
		t.Fatalf("after copying again: %v", got)
	}
}

// BenchmarkSaveEndpointStatus saves a thousand lanes' status per operation, as a relay with a
// thousand endpoints does at each report.
func BenchmarkSaveEndpointStatus(b *testing.B) {
	_, pool := relaytest.MigratedDB(b)
	rows := make([]state.EndpointStatus, 1000)
	now := time.Now()
	for i := range rows {
		rows[i] = state.EndpointStatus{Pipeline: "p", EndpointID: fmt.Sprintf("ep_%04d", i), Undelivered: int64(i),
			OldestUndelivered: now, LastSuccess: now, LastError: "503", LastErrorAt: now, FailuresInRow: 1}
	}
	b.ResetTimer()
	for b.Loop() {
		if err := state.SaveEndpointStatus(context.Background(), pool, "public", rows); err != nil {
			b.Fatal(err)
		}
	}
}

// An outage begun by two shards is ended once: the first EndOutage reports it ended, the second
// finds it ended; a new outage after it can be ended again.
func TestEndpointOutageEndsOnce(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	for range 2 {
		for shard := range 2 {
			if err := state.BeginOutage(ctx, pool, "public", "ep"); err != nil {
				t.Fatalf("shard %d: %v", shard, err)
			}
		}
		var ended []bool
		for range 2 {
			ok, err := state.EndOutage(ctx, pool, "public", "ep")
			if err != nil {
				t.Fatal(err)
			}
			ended = append(ended, ok)
		}
		if !ended[0] || ended[1] {
			t.Fatalf("two shards ending one outage: %v, want [true false]", ended)
		}
	}
	if ok, err := state.EndOutage(ctx, pool, "public", "other"); err != nil || ok {
		t.Fatalf("ending an outage never begun: %v, %v; want false", ok, err)
	}
}
