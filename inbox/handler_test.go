package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

func TestDeliveryIsAppliedOnceAndRedeliveryAbsorbed(t *testing.T) {
	e := newEnv(t)
	var got inbox.Event
	h, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		got = ev
		return recordEffect(ctx, tx, ev)
	}, inbox.Config{})
	d := newDelivery(`{"order_id":42}`)

	first := post(t, url, d)
	if first.StatusCode != http.StatusOK || first.Header.Get(inbox.HeaderDuplicate) != "" {
		t.Fatalf("first delivery: %s, duplicate=%q", first.Status, first.Header.Get(inbox.HeaderDuplicate))
	}
	if got.ID.String() != d.id || got.Type != "order.created" || string(got.Payload) != `{"order_id":42}` {
		t.Fatalf("ProcessFunc saw %+v", got)
	}
	d.attempt, d.ts = 2, d.ts+1 // the relay's retry: same id, new attempt and timestamp
	second := post(t, url, d)
	if second.StatusCode != http.StatusOK || second.Header.Get(inbox.HeaderDuplicate) != "true" {
		t.Fatalf("redelivery: %s, duplicate=%q", second.Status, second.Header.Get(inbox.HeaderDuplicate))
	}
	if n := e.effects(t); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	var status, sig string
	var processed bool
	err := e.pool.QueryRow(context.Background(),
		`SELECT handler_status, processed_at IS NOT NULL, signature FROM inbox_events WHERE id = $1`, d.id).
		Scan(&status, &processed, &sig)
	if err != nil {
		t.Fatal(err)
	}
	if status != "done" || !processed || !strings.HasPrefix(sig, "sha256=") {
		t.Fatalf("inbox row: status=%s processed=%v signature=%q", status, processed, sig)
	}
	if s := h.Stats(); s != (inbox.Stats{Processed: 1, Duplicates: 1}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestStandardWebhooksDelivery(t *testing.T) {
	e := newEnv(t)
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	_, url := e.serve(t, []string{"plain-for-x-signature", secret}, recordEffect, inbox.Config{})
	d := newDelivery(`{"order_id":7}`)
	d.scheme, d.secrets = signature.StandardWebhooks, []string{secret}
	for range 2 {
		if resp := post(t, url, d); resp.StatusCode != http.StatusOK {
			t.Fatalf("standard-webhooks delivery: %s", resp.Status)
		}
	}
	if n := e.effects(t); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// The relay may deliver one event many times at once (a retry racing a slow first attempt,
// two relays after a failover). The ProcessFunc must still run once.
func TestConcurrentDeliveriesRunTheHandlerOnce(t *testing.T) {
	e := newEnv(t)
	if _, err := e.pool.Exec(context.Background(), `CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0)`); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	h, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		calls.Add(1)
		// Hold the claim a while so the other deliveries pile up behind it.
		_, err := tx.Exec(ctx, `SELECT pg_sleep(0.1); UPDATE counter SET n = n + 1`)
		return err
	}, inbox.Config{})
	d := newDelivery(`{"order_id":42}`)
	codes := deliverConcurrently(t, url, d, 50)
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("delivery %d: %d", i, c)
		}
	}
	if n := e.count(t, `SELECT n FROM counter`); n != 1 || calls.Load() != 1 {
		t.Fatalf("counter = %d, ProcessFunc calls = %d; want 1 and 1", n, calls.Load())
	}
	if n := e.count(t, `SELECT count(*) FROM inbox_events WHERE handler_status = 'done'`); n != 1 || e.inboxRows(t) != 1 {
		t.Fatalf("%d done rows of %d, want exactly 1", n, e.inboxRows(t))
	}
	if s := h.Stats(); s.Processed != 1 || s.Duplicates != 49 {
		t.Fatalf("stats %+v", s)
	}
}

// When the delivery holding the claim rolls back, one of those waiting behind it takes over.
func TestConcurrentDeliveryTakesOverAfterRollback(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	_, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := recordEffect(ctx, tx, ev); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			time.Sleep(200 * time.Millisecond)
			return errors.New("first attempt fails")
		}
		return nil
	}, inbox.Config{})
	codes := deliverConcurrently(t, url, newDelivery(`{}`), 10)
	var failed int
	for _, c := range codes {
		switch c {
		case http.StatusOK:
		case http.StatusInternalServerError:
			failed++
		default:
			t.Errorf("unexpected status %d", c)
		}
	}
	if failed != 1 || e.effects(t) != 1 || calls.Load() != 2 {
		t.Fatalf("%d failures, %d effects, %d calls; want 1, 1, 2", failed, e.effects(t), calls.Load())
	}
}

func deliverConcurrently(t *testing.T, url string, d delivery, n int) []int {
	t.Helper()
	h := d.header(t)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(d.body)))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header = h.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	return codes
}

func TestFailingHandlerLeavesNothingUntilItSucceeds(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	h, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := recordEffect(ctx, tx, ev); err != nil {
			return err
		}
		if calls.Add(1) <= 2 {
			return errors.New("warehouse offline")
		}
		return nil
	}, inbox.Config{})
	d := newDelivery(`{"order_id":42}`)
	for attempt := 1; attempt <= 4; attempt++ {
		d.attempt = attempt
		resp := post(t, url, d)
		want, rows := http.StatusOK, 1
		if attempt <= 2 {
			want, rows = http.StatusInternalServerError, 0
		}
		if resp.StatusCode != want {
			t.Fatalf("attempt %d: %s, want %d", attempt, resp.Status, want)
		}
		if e.inboxRows(t) != rows || e.effects(t) != rows {
			t.Fatalf("attempt %d: %d inbox rows, %d effects, want %d", attempt, e.inboxRows(t), e.effects(t), rows)
		}
	}
	if s := h.Stats(); s != (inbox.Stats{Processed: 1, Duplicates: 1, Failed: 2}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestPanickingHandlerIsRolledBack(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	var logs relaytest.SyncBuffer
	_, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := recordEffect(ctx, tx, ev); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			panic("nil map in handler")
		}
		return nil
	}, inbox.Config{Logger: zerolog.New(&logs)})
	d := newDelivery(`{}`)
	if resp := post(t, url, d); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("panic answered %s, want 500", resp.Status)
	}
	if l := logs.String(); !strings.Contains(l, "nil map in handler") || !strings.Contains(l, d.id) || !strings.Contains(l, "handler_test.go") {
		t.Fatalf("the log does not show the panic, event id and stack:\n%s", l)
	}
	if e.inboxRows(t) != 0 || e.effects(t) != 0 {
		t.Fatalf("after panic: %d inbox rows, %d effects", e.inboxRows(t), e.effects(t))
	}
	if resp := post(t, url, d); resp.StatusCode != http.StatusOK || e.effects(t) != 1 {
		t.Fatalf("retry after panic: %s, %d effects", resp.Status, e.effects(t))
	}
}

// A ProcessFunc that ignores a failed statement returns nil on an aborted transaction; the
// inbox must not report success.
func TestHandlerSwallowingAFailedStatement(t *testing.T) {
	e := newEnv(t)
	_, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		_ = recordEffect(ctx, tx, ev)
		_, _ = tx.Exec(ctx, `SELECT 1/0`)
		return nil
	}, inbox.Config{})
	if resp := post(t, url, newDelivery(`{}`)); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("answered %s, want 500", resp.Status)
	}
	if e.inboxRows(t) != 0 || e.effects(t) != 0 {
		t.Fatal("rows left behind")
	}
}

func TestRefusedDeliveriesLeaveNoRow(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", inbox.DefaultMaxBodyBytes) + `"}`
	cases := []struct {
		name   string
		d      func(d *delivery)
		edit   func(h http.Header)
		method string
		want   int
	}{
		{name: "wrong secret", d: func(d *delivery) { d.secrets = []string{"guess"} }, want: 401},
		{name: "no signature", edit: func(h http.Header) { h.Del("X-Signature") }, want: 401},
		{name: "stale timestamp", d: func(d *delivery) { d.ts -= 301 }, want: 401},
		{name: "future timestamp", d: func(d *delivery) { d.ts += 301 }, want: 401},
		{name: "oversize body", d: func(d *delivery) { d.body = []byte(big) }, want: 413},
		{name: "oversize body without Content-Length", d: func(d *delivery) { d.body = []byte(big) }, method: "chunked", want: 413},
		{name: "id not a uuid", d: func(d *delivery) { d.id = "order-42" }, want: 400},
		{name: "body not JSON", d: func(d *delivery) { d.body = []byte(`order 42`) }, want: 400},
		{name: "JSON that jsonb refuses", d: func(d *delivery) { d.body = []byte(`{"a":"\u0000"}`) }, want: 400},
		{name: "GET", method: http.MethodGet, want: 405},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var calls atomic.Int32
			h, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
				calls.Add(1)
				return recordEffect(ctx, tx, ev)
			}, inbox.Config{})
			d := newDelivery(`{"order_id":42}`)
			if c.d != nil {
				c.d(&d)
			}
			hdr := d.header(t)
			if c.edit != nil {
				c.edit(hdr)
			}
			var resp *http.Response
			switch c.method {
			case "chunked":
				resp = sendChunked(t, url, hdr, d.body)
			case "":
				resp = send(t, http.MethodPost, url, hdr, d.body)
			default:
				resp = send(t, c.method, url, hdr, d.body)
			}
			if resp.StatusCode != c.want {
				t.Fatalf("answered %s, want %d", resp.Status, c.want)
			}
			if e.inboxRows(t) != 0 || e.effects(t) != 0 || calls.Load() != 0 {
				t.Fatalf("%d inbox rows, %d effects, %d calls after a refusal", e.inboxRows(t), e.effects(t), calls.Load())
			}
			if c.want != 405 && h.Stats().Rejected != 1 {
				t.Fatalf("stats %+v", h.Stats())
			}
		})
	}
}

// sendChunked posts body with no Content-Length, so only the read limit can stop it.
func sendChunked(t *testing.T, url string, h http.Header, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, struct{ io.Reader }{bytes.NewReader(body)})
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.ContentLength != -1 && req.ContentLength != 0 {
		t.Fatalf("request had Content-Length %d", req.ContentLength)
	}
	return resp
}

func TestDatabaseErrorIs503(t *testing.T) {
	cases := map[string]func(t *testing.T, e env){
		"inbox_events dropped": func(t *testing.T, e env) {
			if _, err := e.pool.Exec(context.Background(), `DROP TABLE inbox_events`); err != nil {
				t.Fatal(err)
			}
		},
		"pool closed": func(t *testing.T, e env) { e.pool.Close() },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var calls atomic.Int32
			h, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
				calls.Add(1)
				return nil
			}, inbox.Config{})
			breakIt(t, e)
			resp := post(t, url, newDelivery(`{}`))
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("answered %s (Retry-After %q), want 503", resp.Status, resp.Header.Get("Retry-After"))
			}
			if calls.Load() != 0 || h.Stats().Unavailable != 1 {
				t.Fatalf("calls %d, stats %+v", calls.Load(), h.Stats())
			}
		})
	}
}

// The inbox record and the ProcessFunc's writes share one transaction: a database failure at
// commit leaves neither.
func TestDatabaseErrorAfterHandlerLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// A deferred constraint fails only at COMMIT, after the ProcessFunc has run.
	if _, err := e.pool.Exec(ctx, `
		CREATE TABLE strict (v int, CONSTRAINT v_unique UNIQUE (v) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO strict VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, url := e.serve(t, []string{"topsecret"}, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if err := recordEffect(ctx, tx, ev); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO strict VALUES (1)`)
		return err
	}, inbox.Config{})
	if resp := post(t, url, newDelivery(`{}`)); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("answered %s, want 503", resp.Status)
	}
	if e.inboxRows(t) != 0 || e.effects(t) != 0 {
		t.Fatalf("%d inbox rows, %d effects after a failed commit", e.inboxRows(t), e.effects(t))
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	e := newEnv(t)
	if _, err := inbox.New(e.pool, nil, recordEffect, inbox.Config{}); err == nil {
		t.Error("no secrets accepted")
	}
	if _, err := inbox.New(e.pool, []string{"s"}, nil, inbox.Config{}); err == nil {
		t.Error("nil ProcessFunc accepted")
	}
	if _, err := inbox.New(e.pool, []string{"s"}, recordEffect, inbox.Config{MaxBodyBytes: -1}); err == nil {
		t.Error("negative MaxBodyBytes accepted")
	}
}
