package demo

import (
	"bytes"
	"context"
	"errors"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// cluster records the throwaway cluster's directory and postmaster, to check both are gone.
type cluster struct {
	dir string
	pid int
}

func (c *cluster) started(t *testing.T) func(string) {
	return func(dir string) {
		c.dir = dir
		b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
		if err != nil {
			t.Errorf("read postmaster.pid: %v", err)
			return
		}
		c.pid, _ = strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	}
}

func (c *cluster) assertGone(t *testing.T) {
	t.Helper()
	if c.dir == "" || c.pid == 0 {
		t.Fatal("ClusterStarted was not called with a running cluster")
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s still exists (stat: %v)", c.dir, err)
	}
	// Signal 0 checks for existence; an exited child that was reaped is gone.
	if err := syscall.Kill(c.pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postmaster %d still running (kill 0: %v)", c.pid, err)
	}
}

// summaryFields parses the last line, "demo: written=… delivered=…", into its numbers.
func summaryFields(t *testing.T, out string) map[string]int {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "demo: written=") {
		t.Fatalf("last line is not the summary: %q\noutput:\n%s", last, out)
	}
	fields := map[string]int{}
	for _, kv := range strings.Fields(strings.TrimPrefix(last, "demo: ")) {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil {
			fields[k] = n
		}
	}
	return fields
}

// runToSummary runs the demo with cfg (its output to out, its cluster reported to c), checks
// that it ended cleanly, removed its cluster and wrote at least 100 orders, and returns the
// summary's fields and the orders written.
func runToSummary(t *testing.T, c *cluster, out *relaytest.SyncBuffer, cfg Config) (map[string]int, int) {
	t.Helper()
	cfg.Out, cfg.ClusterStarted = out, c.started(t)
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\noutput:\n%s", err, out.String())
	}
	c.assertGone(t)
	f := summaryFields(t, out.String())
	written := f["written"]
	if written < 100 {
		t.Fatalf("written=%d, want hundreds at %.0f/s for %s\n%s", written, cfg.Rate, cfg.Duration, out.String())
	}
	return f, written
}

func TestRunDeliversEveryOrderOnceThroughOutagesAndLostAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	t.Parallel()
	var out relaytest.SyncBuffer
	var c cluster
	f, written := runToSummary(t, &c, &out, Config{
		Duration: 6 * time.Second, Rate: 100,
		FailEvery: 2 * time.Second, FailFor: 700 * time.Millisecond, LoseEvery: 10,
		ProgressInterval: time.Second,
	})
	if f["delivered"] != written || f["reservations"] != written {
		t.Errorf("delivered=%d reservations=%d, want both = written=%d", f["delivered"], f["reservations"], written)
	}
	if f["duplicates_absorbed"] == 0 {
		t.Error("duplicates_absorbed=0: lost answers should have been redelivered and absorbed by the inbox")
	}
	if f["retries"] == 0 {
		t.Error("retries=0: the consumer's outages should have made the relay retry")
	}
	// Every partner endpoint received exactly what its subscription gives it, from one slot.
	if f["partner_deliveries"] == 0 || f["partner_deliveries"] != f["partner_subscribed"] {
		t.Errorf("partner_deliveries=%d partner_subscribed=%d, want equal and positive", f["partner_deliveries"], f["partner_subscribed"])
	}
	// Each partner received all it subscribes to, and something: a subscription that never
	// matches would show 0 of 0 all along, which looks broken.
	for _, id := range []string{"acme", "globex", "ledger", "initech"} {
		m := regexp.MustCompile(`demo: partner ` + id + ` +\(.*\) received (\d+) of the (\d+) orders`).FindStringSubmatch(out.String())
		if m == nil || m[1] != m[2] || m[2] == "0" {
			t.Errorf("partner %s: %v, want a line with all of a positive number of orders:\n%s", id, m, out.String())
		}
	}
	if !strings.Contains(out.String(), "demo: partner initech  (tenant initech, order.*, Standard Webhooks)") {
		t.Errorf("initech is not the Standard Webhooks partner:\n%s", out.String())
	}
	for _, want := range []string{"consumer failing on purpose", "consumer recovered", "demo: t=", "removed the cluster"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("non-terminal output contains ANSI escapes")
	}
}

func TestRunStopsCleanlyWhenCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out relaytest.SyncBuffer
	var c cluster
	done := make(chan error, 1)
	go func() {
		// A drain bound for a loaded machine: what this test checks is that every order written
		// is delivered after the cancel, not how soon.
		done <- Run(ctx, Config{Out: &out, IsTTY: true, ClusterStarted: c.started(t), DrainTimeout: time.Minute})
	}()
	// Cancel (as Ctrl-C does) once orders are flowing.
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "written  ") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of cancel")
	}
	c.assertGone(t)
	f := summaryFields(t, out.String())
	if f["delivered"] == 0 || f["delivered"] != f["written"] {
		t.Errorf("delivered=%d written=%d, want equal and positive", f["delivered"], f["written"])
	}
	if !strings.Contains(out.String(), "\x1b[") {
		t.Error("terminal output has no ANSI redraw")
	}
}

func TestRunCancelledDuringStartLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var c cluster
	started := c.started(t)
	err := Run(ctx, Config{ClusterStarted: func(dir string) { started(dir); cancel() }})
	if err != nil {
		t.Fatalf("Run cancelled during start: %v, want nil", err)
	}
	c.assertGone(t)
}

func TestRunWithoutServerBinariesSaysWhatToInstall(t *testing.T) {
	orig := startCluster
	startCluster = func(context.Context, pgtest.Options) (*pgtest.Cluster, error) { return nil, pgtest.ErrNoBinaries }
	defer func() { startCluster = orig }()
	var out bytes.Buffer
	err := Run(context.Background(), Config{Out: &out})
	if !errors.Is(err, pgtest.ErrNoBinaries) {
		t.Fatalf("err = %v, want pgtest.ErrNoBinaries", err)
	}
	if !strings.Contains(err.Error(), pgtest.InstallHint) || !strings.Contains(err.Error(), "DB_DSN") {
		t.Errorf("error does not name the install command and DB_DSN: %v", err)
	}
	if strings.Contains(out.String(), "written=") {
		t.Errorf("printed a summary of a demo that never ran: %q", out.String())
	}
}

func TestRunOnAGivenDatabaseDropsOnlyWhatItCreated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	t.Parallel()
	ctx := context.Background()
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db, err := c.CreateDatabase(ctx, "given")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Someone else's slot and publication, which the demo must leave alone.
	for _, stmt := range []string{`CREATE PUBLICATION theirs FOR ALL TABLES`,
		`SELECT pg_create_logical_replication_slot('theirs', 'pgoutput')`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var out relaytest.SyncBuffer
	err = Run(ctx, Config{DSN: c.DSN(db), Out: &out, Duration: 2 * time.Second,
		ClusterStarted: func(string) { t.Error("started a cluster although given a DSN") }})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	f := summaryFields(t, out.String())
	var orders, big, slots, pubs int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM orders WHERE total >= 400),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2, $3)),
		(SELECT count(*) FROM pg_publication WHERE pubname IN ($1, $2, $3))`, Slot, AuditSlot, PartnersSlot).Scan(&orders, &big, &slots, &pubs); err != nil {
		t.Fatal(err)
	}
	if orders != f["written"] || orders == 0 {
		t.Errorf("orders has %d rows, the summary says written=%d", orders, f["written"])
	}
	// The filtered pipeline got exactly the big orders.
	if big != f["big_orders"] {
		t.Errorf("%d orders have total >= 400, the audit pipeline delivered big_orders=%d", big, f["big_orders"])
	}
	if slots != 0 || pubs != 0 {
		t.Errorf("left %d slots and %d publications named %s, %s or %s", slots, pubs, Slot, AuditSlot, PartnersSlot)
	}
	var endpoints int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoints`).Scan(&endpoints); err != nil || endpoints != 0 {
		t.Errorf("left %d endpoints (%v): the demo removes its own", endpoints, err)
	}
	if f["partner_deliveries"] == 0 || f["partner_deliveries"] != f["partner_subscribed"] {
		t.Errorf("partner_deliveries=%d partner_subscribed=%d, want equal and positive", f["partner_deliveries"], f["partner_subscribed"])
	}
	var theirs int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'theirs') +
		(SELECT count(*) FROM pg_publication WHERE pubname = 'theirs')`).Scan(&theirs); err != nil {
		t.Fatal(err)
	}
	if theirs != 2 {
		t.Errorf("the demo touched another slot or publication (%d of 2 left)", theirs)
	}
}
