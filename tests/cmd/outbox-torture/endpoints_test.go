package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitsForLock reports whether a backend named app waits for a lock within limit.
func waitsForLock(t *testing.T, dsn, app string, limit time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE NOT l.granted AND a.application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return true
		}
	}
	return false
}

func connectAs(t *testing.T, dsn, app string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// The ordering the endpoints checks rest on, on a real server: an endpoint change waits for a
// transaction whose first insert came before it and gets a later time; an insert that comes
// while a change holds its lock waits for the change to commit and gets a time after the
// change's, both on a fresh and on a cached prepared statement. Without the LOCK TABLE in
// change neither wait happens (seen to fail that way).
func TestEndpointChangeOrdersAgainstInserts(t *testing.T) {
	ctx := context.Background()
	dsn := migratedDB(t)
	cfg := defaultConfig()
	cfg.Endpoints = true
	recv, err := startEndpointReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	m := newEpManager(cfg, dsn, "", recv, t.Logf)
	defer m.drop()
	w := newWriter(0, dsn, cfg, &ledger{})
	wconn := connectAs(t, dsn, "torture-writer-test")
	agg := w.aggs[0]

	t.Run("a change waits for a transaction that inserted first", func(t *testing.T) {
		tx, err := wconn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, insertAt, err := w.insertRouted(ctx, tx, agg, 1)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := m.apply(ctx, m.newEndpoint(0))
			done <- err
		}()
		if !waitsForLock(t, dsn, m.appName, 5*time.Second) {
			t.Fatal("the change did not wait for the open transaction's lock")
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		tl, _ := m.snapshot()
		vs := tl["ep-000"]
		if len(vs) != 1 || !vs[0].At.After(insertAt) {
			t.Fatalf("change %+v, insert at %s: want the change after it", vs, insertAt)
		}
		e := event{Tenant: agg.Tenant, EventType: eventTypes[agg.Type][0], AggType: agg.Type}
		if p := rule(vs, txPos{At: insertAt}, e); p.Why != whyBeforeCreation {
			t.Fatalf("the insert's pair with the new endpoint: %+v, want %q", p, whyBeforeCreation)
		}
	})
	for _, cached := range []bool{false, true} {
		name := "an insert waits for a change that holds its lock"
		if cached {
			name += ", on a cached statement"
		}
		t.Run(name, func(t *testing.T) {
			conn := connectAs(t, dsn, "torture-insert-test")
			if cached { // prepare insertRoutedSQL on this connection first
				tx, _ := conn.Begin(ctx)
				if _, _, err := w.insertRouted(ctx, tx, agg, 1); err != nil {
					t.Fatal(err)
				}
				_ = tx.Rollback(ctx)
			}
			mconn, err := m.connection(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ctx1, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ctx2, cancel2 := context.WithTimeout(ctx, 10*time.Second)
			defer cancel2()
			mtx, err := mconn.Begin(ctx1)
			if err != nil {
				t.Fatal(err)
			}
			ch := epChange{Op: opPause, ID: "ep-000", V: epVersion{}}
			changeAt, err := m.change(ctx1, mtx, ch)
			if err != nil {
				t.Fatal(err)
			}
			type res struct {
				at  time.Time
				err error
			}
			done := make(chan res, 1)
			go func() {
				tx, err := conn.Begin(ctx2)
				if err != nil {
					done <- res{err: err}
					return
				}
				_, at, err := w.insertRouted(ctx2, tx, agg, 2)
				if err == nil {
					err = tx.Commit(ctx2)
				}
				done <- res{at, err}
			}()
			if !waitsForLock(t, dsn, "torture-insert-test", 5*time.Second) {
				_ = mtx.Rollback(ctx)
				t.Fatal("the insert did not wait for the change's lock")
			}
			if err := mtx.Commit(ctx1); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !r.at.After(changeAt) {
				t.Fatalf("insert at %s, change at %s: want the insert after", r.at, changeAt)
			}
		})
	}
}

// The manager against a real server under the writers' load: every kind of change commits,
// none is refused by the table's checks, and the table ends as the timeline's last versions.
func TestEndpointManagerUnderLoad(t *testing.T) {
	ctx := context.Background()
	dsn := migratedDB(t)
	cfg := defaultConfig()
	cfg.Endpoints, cfg.Events, cfg.Duration, cfg.Writers = true, 400, 3*time.Second, 2
	cfg.EndpointCount, cfg.ChangeMin, cfg.ChangeMax = 10, 5*time.Millisecond, 20*time.Millisecond
	cfg.Seed = 1
	recv, err := startEndpointReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	m := newEpManager(cfg, dsn, "", recv, t.Logf)
	if err := m.setup(ctx); err != nil {
		t.Fatal(err)
	}
	load, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var l ledger
	errs := make(chan error, cfg.Writers+1)
	for i := 0; i < cfg.Writers; i++ {
		w := newWriter(i, dsn, cfg, &l)
		go func() { errs <- w.run(load, ctx) }()
	}
	go func() { m.run(load, ctx); errs <- nil }()
	for i := 0; i < cfg.Writers+1; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	m.finish(ctx)
	tl, st := m.snapshot()
	if len(st.Failures) > 0 {
		t.Fatalf("manager failures: %q", st.Failures)
	}
	for _, op := range epOps {
		if op == opGone {
			continue // the relay's own disable after a 410 (gone.go): no relay runs here
		}
		if st.Committed[op] == 0 {
			t.Errorf("no %s committed: %+v", op, st.Committed)
		}
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, state, coalesce(tenant_id, ''), event_types, aggregate_types, url, updated_at
		FROM outbox_endpoints`)
	if err != nil {
		t.Fatal(err)
	}
	table := map[string]epVersion{}
	for rows.Next() {
		var id, url string
		var v epVersion
		if err := rows.Scan(&id, &v.State, &v.Tenant, &v.EventTypes, &v.AggTypes, &url, &v.At); err != nil {
			t.Fatal(err)
		}
		if url != recv.base+"/ep/"+id {
			t.Errorf("%s: url %s", id, url)
		}
		table[id] = v
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for id, vs := range tl {
		for _, v := range vs {
			if v.Before == 0 || v.After <= v.Before {
				t.Errorf("%s: %s's commit bounds [%s, %s)", id, v.Op, v.Before, v.After)
			}
		}
		last := vs[len(vs)-1]
		got, ok := table[id]
		switch {
		case ok != last.Exists:
			t.Errorf("%s: in the table %v, last version %+v", id, ok, last)
		case ok && (got.State != last.State || got.Tenant != last.Tenant || !got.At.Equal(last.At) ||
			!slices.Equal(got.EventTypes, last.EventTypes) || !slices.Equal(got.AggTypes, last.AggTypes)):
			t.Errorf("%s: table %+v, last version %+v", id, got, last)
		case ok && got.State == stPaused:
			t.Errorf("%s still paused after finish", id)
		}
	}
	if len(table) == 0 || l.events.Load() == 0 {
		t.Fatalf("%d endpoints, %d events", len(table), l.events.Load())
	}
	t.Logf("%d events; %s", l.events.Load(), m.summary())
}
