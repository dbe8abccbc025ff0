package inbox_test

import (
	"bytes"
	"context"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/signature"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// exampleDSN makes a migrated database on the test cluster for the examples, which a user
// copies and so import nothing internal; in their code this is their DSN.
func exampleDSN() string {
	dsn, err := relaytest.NewMigratedDB(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	return dsn
}

// delivery is one webhook as the relay sends it, signed with package signature so the tests
// check the very contract the relay implements.
type delivery struct {
	scheme  signature.Scheme
	secrets []string // the relay's secrets: one signature per secret
	id      string   // event id header value
	ts      int64    // unix seconds of the attempt
	attempt int
	body    []byte
}

func newDelivery(body string) delivery {
	return delivery{secrets: []string{"topsecret"}, id: uuid.NewString(), ts: time.Now().Unix(),
		attempt: 1, body: []byte(body)}
}

func (d delivery) header(t testing.TB) http.Header {
	t.Helper()
	keys, err := signature.Keys(d.scheme, d.secrets)
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(d.ts, 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Event-Id", d.id)
	h.Set("X-Event-Type", "order.created")
	h.Set("X-Aggregate-Type", "order")
	h.Set("X-Aggregate-Id", "42")
	h.Set("X-Attempt", strconv.Itoa(d.attempt))
	h.Set("X-Event-Sequence", "0000000001")
	if d.scheme == signature.StandardWebhooks {
		h.Set("webhook-id", d.id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", string(signature.AppendStandard(nil, keys, d.id, d.ts, d.body)))
		return h
	}
	h.Set("X-Timestamp", ts)
	h.Set("X-Signature", string(signature.AppendX(nil, keys, d.ts, d.body)))
	return h
}

// post sends d to url and returns the response, its body already drained and closed.
func post(t testing.TB, url string, d delivery) *http.Response {
	t.Helper()
	return send(t, http.MethodPost, url, d.header(t), d.body)
}

func send(t testing.TB, method, url string, h http.Header, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	return resp
}

// env is a migrated database, a pool, and an effects table that ProcessFuncs write to.
type env struct {
	pool *pgxpool.Pool
}

func newEnv(t *testing.T) env {
	t.Helper()
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id uuid NOT NULL, at timestamptz DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	return env{pool: pool}
}

// serve mounts an inbox with process on a real HTTP server and returns the handler and URL.
func (e env) serve(t *testing.T, secrets []string, process inbox.ProcessFunc, cfg inbox.Config) (*inbox.Handler, string) {
	t.Helper()
	h, err := inbox.New(e.pool, secrets, process, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (e env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e env) inboxRows(t *testing.T) int { return e.count(t, `SELECT count(*) FROM inbox_events`) }
func (e env) effects(t *testing.T) int   { return e.count(t, `SELECT count(*) FROM effects`) }

// recordEffect is a ProcessFunc whose effect is one row in effects.
func recordEffect(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
	return err
}
