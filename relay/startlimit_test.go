package relay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// limitEnv is one relay process with 12 pipelines on a cluster of its own whose replication
// limits the test sets: pipeline pNN takes the rows of aggregate type pNN, and starts with the
// rows still pending (no pipeline owns the status, so every row stays pending).
type limitEnv struct {
	t     *testing.T
	cl    *pgtest.Cluster
	env   *env
	reg   *prometheus.Registry
	addr  atomic.Value
	names []string
	sent  map[string]relaytest.Result // by pipeline
	round int                         // batches produced: each has aggregate types of its own
}

func newLimitEnv(t *testing.T, slots, senders int) *limitEnv {
	ctx := context.Background()
	cl, err := pgtest.Start(ctx, pgtest.Options{Settings: map[string]string{
		"max_replication_slots": fmt.Sprint(slots), "max_wal_senders": fmt.Sprint(senders)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	db, err := cl.CreateDatabase(ctx, "limits")
	if err != nil {
		t.Fatal(err)
	}
	dsn := cl.DSN(db)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := relaytest.Pool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &limitEnv{t: t, cl: cl, env: &env{t: t, dsn: dsn, pool: pool, recv: recv}, reg: prometheus.NewRegistry(),
		sent: map[string]relaytest.Result{}}
	for i := range 12 {
		e.names = append(e.names, fmt.Sprintf("p%02d", i))
	}
	return e
}

func (e *limitEnv) config(c *Config) {
	c.Registerer = e.reg
	c.MetricsAddr = "127.0.0.1:0"
	c.Ready = func(a string) { e.addr.Store(a) }
	c.Pipelines = nil
	for _, n := range e.names {
		c.Pipelines = append(c.Pipelines, Pipeline{Name: n, Filter: fmt.Sprintf("aggregate_type LIKE '%s/%%'", n),
			WebhookURL: e.env.recv.URL, Secrets: []string{secret}, Backfill: true,
			RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	}
	*c = flagFieldsCleared(*c)
}

// produce commits 40 events for every pipeline, of aggregate type <pipeline>/<round> (a type
// per round, so that each round's per-aggregate sequence starts afresh).
func (e *limitEnv) produce() {
	e.round++
	for _, n := range e.names {
		e.sent[n] = merge(e.sent[n], e.env.produce(relaytest.Workload{Events: 40, Aggregates: 4, MaxTxSize: 3,
			Type: fmt.Sprintf("%s/%d", n, e.round)}))
	}
}

// waitDelivered waits until every event sent to the named pipelines has arrived, in order.
func (e *limitEnv) waitDelivered(names []string) {
	e.t.Helper()
	var all relaytest.Result
	for _, n := range names {
		all = merge(all, e.sent[n])
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var ds []relaytest.Delivery
		for _, d := range e.env.recv.Deliveries() {
			if slices.Contains(names, strings.Split(d.Aggregate, "/")[0]) {
				ds = append(ds, d)
			}
		}
		rep := relaytest.Check(all, ds)
		if len(rep.Lost) == 0 || time.Now().After(deadline) {
			requireOK(e.t, rep)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// up returns the pipelines whose outbox_relay_pipeline_up is 1, and those where it is 0.
func (e *limitEnv) up() (up, down []string) {
	for _, n := range e.names {
		g, err := e.reg.Gather()
		if err != nil {
			e.t.Fatal(err)
		}
		v := -1.0
		for _, f := range g {
			if f.GetName() != "outbox_relay_pipeline_up" {
				continue
			}
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == n {
					v = m.GetGauge().GetValue()
				}
			}
		}
		switch v {
		case 1:
			up = append(up, n)
		case 0:
			down = append(down, n)
		}
	}
	return up, down
}

// slots returns the pipelines that have a slot.
func (e *limitEnv) slots() []string {
	var have []string
	for _, n := range e.names {
		var ok bool
		_ = e.env.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`,
			"outbox_relay_"+n).Scan(&ok)
		if ok {
			have = append(have, n)
		}
	}
	return have
}

// blocked waits until exactly two pipelines are down, /readyz names those two with the limit
// and the other ten as streaming, and returns the two.
func (e *limitEnv) blocked(limit string) []string {
	e.t.Helper()
	var down []string
	var body string
	waitFor(e.t, 2*time.Minute, "10 pipelines up, 2 named down on /readyz with "+limit, func() bool {
		var up []string
		up, down = e.up()
		var code int
		code, body = get(e.t, &e.addr, "/readyz")
		if len(up) != 10 || len(down) != 2 || code != 503 {
			return false
		}
		for _, n := range down {
			if !strings.Contains(body, n+": cannot st") {
				return false
			}
		}
		return strings.Count(body, limit) == 2 && strings.Contains(body, "streaming "+strings.Join(up, ", "))
	})
	e.t.Logf("/readyz: %s", body)
	if code, _ := get(e.t, &e.addr, "/healthz"); code != 200 {
		e.t.Fatalf("/healthz = %d while two pipelines cannot start, want 200", code)
	}
	return down
}

// 12 pipelines on a server with PostgreSQL's default max_replication_slots = 10 and
// max_wal_senders = 10: ten get their slot and deliver everything while the other two are named
// on /readyz (503, /healthz 200), in outbox_relay_pipeline_up and in `status` with the setting
// and the fix, and retried on their own. The operator raises max_replication_slots and restarts
// PostgreSQL: two pipelines (whichever lose the race for the ten WAL senders, which creating a
// slot needs too) are named with max_wal_senders. Raised too, every pipeline streams and has
// everything, the rows of the two late pipelines included (their slots start with the rows still
// pending), without a restart of the relay.
//
// Before pipelines started on their own, the relay retried the whole start-up as "database not
// ready" forever: no pipeline streamed and /readyz never answered.
func TestPipelinesPastTheSlotLimitDoNotHoldBackTheOthers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	e := newLimitEnv(t, 10, 10)
	cfg := e.env.config()
	e.config(&cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()

	waitFor(t, time.Minute, "ten slots", func() bool { return len(e.slots()) == 10 })
	e.produce()
	down := e.blocked("all replication slots are in use")
	if have := e.slots(); slices.Contains(have, down[0]) || slices.Contains(have, down[1]) {
		t.Fatalf("pipelines %v are down but have slots (%v)", down, have)
	}
	var running []string
	for _, n := range e.names {
		if !slices.Contains(down, n) {
			running = append(running, n)
		}
	}
	e.waitDelivered(running)
	for _, n := range down {
		st, err := inspect.PipelineOf(ctx, e.env.pool, "", n, "outbox_relay_"+n, "outbox_relay_"+n)
		if err != nil {
			t.Fatal(err)
		}
		if st.Healthy || !strings.Contains(st.Reason, "max_replication_slots") || !strings.Contains(st.Reason, "10 of") {
			t.Fatalf("status of %s: healthy %v, %q; want unhealthy naming max_replication_slots and the count", n, st.Healthy, st.Reason)
		}
		t.Logf("status of %s: %s", n, st.Reason)
	}

	// The operator raises max_replication_slots and restarts PostgreSQL.
	e.cl.Set("max_replication_slots", "12")
	if err := e.cl.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The ten pipelines that stream take the ten WAL senders back, so the other two cannot even
	// create their slots (that takes a sender too): whichever two lose are named.
	e.blocked("all WAL senders are in use")

	// And max_wal_senders.
	e.cl.Set("max_wal_senders", "13")
	if err := e.cl.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "every pipeline up and /readyz 200", func() bool {
		up, _ := e.up()
		code, _ := get(t, &e.addr, "/readyz")
		return len(up) == 12 && code == 200
	})
	e.produce()
	e.waitDelivered(e.names)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
}
