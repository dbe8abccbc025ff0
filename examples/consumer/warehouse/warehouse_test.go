package warehouse_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/examples/consumer/warehouse"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/signature"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

const secret = "topsecret"

// start runs the consumer in-process on a free port, as a demo would, and returns its base
// URL and the pool behind it. It stops when the test ends.
func start(t *testing.T) (*warehouse.Server, *pgxpool.Pool, string) {
	t.Helper()
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	srv, err := warehouse.New(ctx, pool, []string{secret}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, pool, "http://" + ln.Addr().String()
}

// orderCreated posts a signed order.created delivery for orderID with event id id, as the
// relay sends it.
func orderCreated(t *testing.T, url string, id uuid.UUID, orderID string, attempt int) *http.Response {
	t.Helper()
	body := []byte(`{"order_id":"` + orderID + `","total":"42.50"}`)
	ts := time.Now().Unix()
	keys, err := signature.Keys(signature.XSignature, []string{secret})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url+"/webhook", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Content-Type": "application/json", "X-Event-Id": id.String(), "X-Event-Type": "order.created",
		"X-Aggregate-Type": "order", "X-Aggregate-Id": orderID, "X-Attempt": strconv.Itoa(attempt),
		"X-Event-Sequence": "1", "X-Timestamp": strconv.FormatInt(ts, 10),
		"X-Signature": string(signature.AppendX(nil, keys, ts, body)),
	} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func reservations(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	n, err := warehouse.Reservations(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRedeliveredOrderIsReservedOnce(t *testing.T) {
	srv, pool, url := start(t)
	id := uuid.New()
	first := orderCreated(t, url, id, "1001", 1)
	second := orderCreated(t, url, id, "1001", 2)
	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusOK {
		t.Fatalf("answers %s, %s; want 200, 200", first.Status, second.Status)
	}
	if second.Header.Get(inbox.HeaderDuplicate) != "true" {
		t.Fatal("the redelivery was not reported as a duplicate")
	}
	if n := reservations(t, pool); n != 1 {
		t.Fatalf("%d stock reservations, want 1", n)
	}
	var order string
	if err := pool.QueryRow(context.Background(), `SELECT order_id FROM stock_reservations WHERE event_id = $1`, id).Scan(&order); err != nil || order != "1001" {
		t.Fatalf("reservation: order %q, err %v", order, err)
	}
	if s := srv.Stats(); s.Processed != 1 || s.Duplicates != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFailingWarehouseAnswers500UntilRecovered(t *testing.T) {
	srv, pool, url := start(t)
	id := uuid.New()
	srv.SetFailing(true)
	for attempt := 1; attempt <= 2; attempt++ {
		if resp := orderCreated(t, url, id, "7", attempt); resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("attempt %d while failing: %s, want 500", attempt, resp.Status)
		}
	}
	if n := reservations(t, pool); n != 0 {
		t.Fatalf("%d reservations while failing", n)
	}
	srv.SetFailing(false)
	if resp := orderCreated(t, url, id, "7", 3); resp.StatusCode != http.StatusOK {
		t.Fatalf("after recovery: %s", resp.Status)
	}
	if n := reservations(t, pool); n != 1 || srv.Stats().Failed != 2 {
		t.Fatalf("%d reservations, stats %+v", n, srv.Stats())
	}
}

func TestHealthAndReadiness(t *testing.T) {
	_, pool, url := start(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	if _, err := pool.Exec(context.Background(), `DROP TABLE inbox_events`); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without inbox_events: %s", resp.Status)
	}
}

// The consumer's database needs nothing from the relay: Setup installs the inbox alone (no
// outbox table) and the warehouse's own table, and running it again changes nothing.
func TestSetupInstallsTheInboxAlone(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range 2 {
		if err := warehouse.Setup(ctx, pool, inbox.Config{}); err != nil {
			t.Fatalf("Setup on an empty database: %v", err)
		}
	}
	var inboxTable, reservations, outbox bool
	err = pool.QueryRow(ctx, `SELECT to_regclass('inbox_events') IS NOT NULL, to_regclass('stock_reservations') IS NOT NULL,
		to_regclass('outbox_events') IS NOT NULL`).Scan(&inboxTable, &reservations, &outbox)
	if err != nil {
		t.Fatal(err)
	}
	if !inboxTable || !reservations || outbox {
		t.Fatalf("inbox_events %v, stock_reservations %v, outbox_events %v; want the first two only", inboxTable, reservations, outbox)
	}
}

func TestReserveIgnoresOtherEvents(t *testing.T) {
	var w warehouse.Warehouse
	// A nil tx proves no statement is run for an event the warehouse does not handle.
	if err := w.Reserve(context.Background(), nil, inbox.Event{Type: "order.shipped"}); err != nil {
		t.Fatal(err)
	}
	w.SetFailing(true)
	if err := w.Reserve(context.Background(), nil, inbox.Event{Type: "order.created"}); !errors.Is(err, warehouse.ErrFailing) {
		t.Fatalf("failing warehouse: %v", err)
	}
}
