package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// logEvent is one JSON log line of a child process that concerns a pipeline.
type logEvent struct {
	proc     int
	pipeline string
	message  string
}

// forward parses proc's JSON log lines onto out until its stderr ends.
func forward(proc int, lines <-chan string, out chan<- logEvent) {
	for l := range lines {
		var m struct {
			Pipeline string `json:"pipeline"`
			Message  string `json:"message"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Pipeline != "" {
			out <- logEvent{proc, m.Pipeline, m.Message}
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func twoPipelineConfig(t *testing.T, all, orders string) string {
	return writeFile(t, "pipelines.yaml", `pipelines:
  - name: all
    webhook: {url: "`+all+`", secret: "${TEST_PIPELINE_SECRET}"}
    retry_min: 10ms
    retry_max: 200ms
  - name: orders
    filter: "event_type LIKE 'order%'"
    webhook:
      url: "`+orders+`"
      secret: ${TEST_PIPELINE_SECRET}
    retry_min: 10ms
    retry_max: 200ms
`)
}

func produceBoth(t *testing.T, pool *pgxpool.Pool, typ string, n int) (orders, invoices relaytest.Result) {
	t.Helper()
	var err error
	if orders, err = relaytest.Produce(context.Background(), pool, relaytest.Workload{Events: n, Aggregates: 10, MaxTxSize: 4, Type: "order" + typ}); err != nil {
		t.Fatal(err)
	}
	if invoices, err = relaytest.Produce(context.Background(), pool, relaytest.Workload{Events: n, Aggregates: 10, MaxTxSize: 4, Type: "invoice" + typ}); err != nil {
		t.Fatal(err)
	}
	return orders, invoices
}

func joined(rs ...relaytest.Result) relaytest.Result {
	var out relaytest.Result
	for _, r := range rs {
		out.Committed = append(out.Committed, r.Committed...)
	}
	return out
}

// Two processes with the same two-pipeline config: each pipeline is streamed by exactly one of
// them. SIGKILL the one streaming "orders": the other takes it over within 10 s, and both
// destinations end with everything, in order per aggregate.
func TestTwoProcessesShareThePipelines(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	all, orders := relaytest.NewReceiver("s3cret"), relaytest.NewReceiver("s3cret")
	t.Cleanup(all.Close)
	t.Cleanup(orders.Close)
	file := twoPipelineConfig(t, all.URL, orders.URL)
	events := make(chan logEvent, 4096)
	var procs [2]*cliProc
	for i := range procs {
		p, lines := startCLI(t, []string{"TEST_PIPELINE_SECRET=s3cret"}, "run", "--config", file, "--dsn", dsn,
			"--metrics-addr", "", "--log-format", "json")
		procs[i] = p
		go forward(i, lines, events)
	}
	leader := map[string]int{}
	deadline := time.After(time.Minute)
	for len(leader) < 2 {
		select {
		case ev := <-events:
			if ev.message == "streaming" {
				if other, ok := leader[ev.pipeline]; ok && other != ev.proc {
					t.Fatalf("pipeline %s streamed by both processes", ev.pipeline)
				}
				leader[ev.pipeline] = ev.proc
			}
		case <-deadline:
			t.Fatalf("not every pipeline streams after a minute: %v", leader)
		}
	}
	t.Logf("leaders: %v", leader)
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots
		WHERE slot_name IN ('outbox_relay_all', 'outbox_relay_orders') AND active`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d active pipeline slots (%v), want 2", n, err)
	}
	o1, i1 := produceBoth(t, pool, "", 100)
	o2, i2 := produceBoth(t, pool, "_b", 100)

	victim := leader["orders"]
	survivor := 1 - victim
	killed := time.Now()
	procs[victim].stop(t, syscall.SIGKILL)
	o3, i3 := produceBoth(t, pool, "_c", 100)
	took := false
	within := time.After(10 * time.Second)
	for !took {
		select {
		case ev := <-events:
			took = ev.proc == survivor && ev.pipeline == "orders" && ev.message == "streaming"
		case <-within:
			t.Fatal("the surviving process did not take the orders pipeline over within 10s")
		}
	}
	t.Logf("orders taken over %s after SIGKILL", time.Since(killed).Round(time.Millisecond))

	check := func(recv *relaytest.Receiver, res relaytest.Result) {
		t.Helper()
		end := time.Now().Add(time.Minute)
		for {
			rep := relaytest.Check(res, recv.Deliveries())
			if len(rep.Lost) == 0 || time.Now().After(end) {
				if !rep.OK() {
					t.Fatalf("guarantee broken: %s; lost %v; phantoms %v; order %v", rep, rep.Lost[:min(5, len(rep.Lost))],
						rep.Phantoms[:min(5, len(rep.Phantoms))], rep.OrderViolations[:min(5, len(rep.OrderViolations))])
				}
				t.Log(rep)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check(orders, joined(o1, o2, o3))
	check(all, joined(o1, i1, o2, i2, o3, i3))
	if code := procs[survivor].stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("survivor exited %d", code)
	}
}

// With --config, a per-pipeline flag is a usage error (exit 2) naming the flag; a config error
// names the line.
func TestConfigRefusesPerPipelineFlags(t *testing.T) {
	file := twoPipelineConfig(t, "http://127.0.0.1:1/a", "http://127.0.0.1:1/b")
	env := []string{"TEST_PIPELINE_SECRET=s", "DB_DSN=postgres://relay@127.0.0.1:1/app"}
	_, stderr, code := execCLI(t, env, "run", "--config", file, "--webhook-url", "http://127.0.0.1:1/c")
	if code != exitUsage || !strings.Contains(stderr, "--webhook-url is a per-pipeline setting") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	bad := writeFile(t, "bad.yaml", "pipelines:\n  - name: a\n    colour: red\n")
	_, stderr, code = execCLI(t, env, "run", "--config", bad)
	if code != exitUsage || !strings.Contains(stderr, "line 3: unknown key colour") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = execCLI(t, []string{"DB_DSN=postgres://relay@127.0.0.1:1/app"}, "run", "--config", file)
	if code != exitUsage || !strings.Contains(stderr, "TEST_PIPELINE_SECRET is not set") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	// Positive control, and the one warning about WEBHOOK_URL: the same file with the variable
	// set starts (and waits for the unreachable database).
	p, lines := startCLI(t, append(env, "WEBHOOK_URL=http://127.0.0.1:1/x"), "run", "--config", file, "--metrics-addr", "",
		"--log-format", "json")
	waitLine(t, lines, "cannot connect to the database; retrying") // nothing listens at 127.0.0.1:1
	p.stop(t, syscall.SIGTERM)
	if c := strings.Count(p.stderr.String(), "are ignored with --config"); c != 1 {
		t.Fatalf("%d warnings about WEBHOOK_URL, want 1:\n%s", c, p.stderr.String())
	}
}

// status lists every pipeline of --config, warns about a pipeline's slot left behind when it is
// removed from the file, and drop-pipeline removes that slot, refusing while it is streamed.
func TestStatusPipelinesAndDropPipeline(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	all, orders := relaytest.NewReceiver("s3cret"), relaytest.NewReceiver("s3cret")
	t.Cleanup(all.Close)
	t.Cleanup(orders.Close)
	file := twoPipelineConfig(t, all.URL, orders.URL)
	env := []string{"TEST_PIPELINE_SECRET=s3cret", "DB_DSN=" + dsn}
	p, lines := startCLI(t, env, "run", "--config", file, "--metrics-addr", "", "--log-format", "json")
	events := make(chan logEvent, 1024)
	go forward(0, lines, events)
	streaming := map[string]bool{}
	for deadline := time.After(time.Minute); len(streaming) < 2; {
		select {
		case ev := <-events:
			streaming[ev.pipeline] = streaming[ev.pipeline] || ev.message == "streaming"
			if !streaming[ev.pipeline] {
				delete(streaming, ev.pipeline)
			}
		case <-deadline:
			t.Fatalf("pipelines streaming after a minute: %v", streaming)
		}
	}
	type doc struct {
		Healthy   bool `json:"healthy"`
		Pipelines []struct {
			Name    string  `json:"name"`
			Healthy bool    `json:"healthy"`
			Filter  *string `json:"filter"`
		} `json:"pipelines"`
		Unused struct {
			Slots []string `json:"slots"`
		} `json:"unused"`
	}
	status := func(args ...string) (doc, int) {
		t.Helper()
		out, stderr, code := execCLI(t, env, append([]string{"status", "--json"}, args...)...)
		var d doc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("status %v: %v\n%s\n%s", args, err, out, stderr)
		}
		return d, code
	}
	d, code := status("--config", file)
	if code != 0 || !d.Healthy || len(d.Pipelines) != 2 || !d.Pipelines[0].Healthy || !d.Pipelines[1].Healthy ||
		d.Pipelines[1].Filter == nil || len(d.Unused.Slots) != 0 {
		t.Fatalf("status of two running pipelines: exit %d, %+v", code, d)
	}
	if d, _ = status("--config", file, "--pipeline", "orders"); len(d.Pipelines) != 1 || d.Pipelines[0].Name != "orders" {
		t.Fatalf("--pipeline orders: %+v", d)
	}
	_, stderr, code := execCLI(t, env, "drop-pipeline", "orders")
	if code != 1 || !strings.Contains(stderr, "slot is active") {
		t.Fatalf("drop-pipeline of a streamed pipeline: exit %d, %s", code, stderr)
	}
	p.stop(t, syscall.SIGTERM)
	// The file without orders: its slot is reported unused, and the exit code says unhealthy
	// (nothing streams any more).
	onlyAll := writeFile(t, "all.yaml", `pipelines:
  - name: all
    webhook: {url: "`+all.URL+`", secret: "${TEST_PIPELINE_SECRET}"}
`)
	d, code = status("--config", onlyAll)
	if code == 0 || len(d.Unused.Slots) != 1 || d.Unused.Slots[0] != "outbox_relay_orders" {
		t.Fatalf("status without orders: exit %d, %+v", code, d)
	}
	if _, stderr, code = execCLI(t, env, "drop-pipeline", "orders"); code != 0 {
		t.Fatalf("drop-pipeline: exit %d, %s", code, stderr)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'outbox_relay_orders')
		+ (SELECT count(*) FROM pg_publication WHERE pubname = 'outbox_relay_orders')`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d of the slot and publication left (%v)", n, err)
	}
	if d, _ = status("--config", onlyAll); len(d.Unused.Slots) != 0 {
		t.Fatalf("still unused after the drop: %v", d.Unused.Slots)
	}
	// Clean up the other pipeline's slot, shared by this cluster's databases.
	if _, stderr, code = execCLI(t, env, "drop-pipeline", "all"); code != 0 {
		t.Fatalf("drop-pipeline all: exit %d, %s", code, stderr)
	}
}
