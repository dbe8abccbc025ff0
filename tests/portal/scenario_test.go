package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/portal"
	"github.com/outbox-relay/outbox-relay/relay"
)

var update = flag.Bool("update", false, "write the screenshots into docs/images/portal")

func TestMain(m *testing.M) {
	code := pgtest.Main(m, pgtest.Options{})
	closeBrowser()
	os.Exit(code)
}

const (
	opToken    = "op-token-0123456789abcdefghij"
	signingKey = "mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U="
	secretsKey = "q7d3bXHgf3wE2Q1r2mS9c0dYp8k2QmFvQ1h6d3l4cE0="
)

// site is what the application runs: its database, the relay delivering to partner endpoints,
// and the API with the portal, mounted in the application's own server.
type site struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
	keys *api.Keys
}

// loopback admits the receivers of this test, which listen on 127.0.0.1, for the endpoints a
// tenant adds (an operator's --egress-allow): the URL guard refuses private addresses for them.
var loopback = endpoints.Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

func newSite(t *testing.T) *site {
	t.Helper()
	dsn, pool := relaytest.MigratedDB(t)
	keys, err := api.ParseKeys(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "ops", Token: opToken}},
		SigningKeys: keys, SecretsKeys: secretsKey, Egress: loopback})
	if err != nil {
		t.Fatal(err)
	}
	slot := fmt.Sprintf("portal_%d", rand.Uint32())
	p, err := portal.New(portal.Config{API: a, Pool: pool, SigningKeys: keys, Title: "Acme Cloud webhooks",
		Pipelines: []portal.Pipeline{{Name: "default", Slot: slot}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", a)
	mux.Handle("/portal/", p)
	mux.Handle("/console/", p)
	s := &site{t: t, pool: pool, srv: httptest.NewServer(mux), keys: keys}
	t.Cleanup(s.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- relay.Run(ctx, relay.Config{DSN: dsn, Slot: slot, Publication: "pub_" + slot, Endpoints: true,
			SecretsKeys: secretsKey, Egress: loopback, RetryMin: 300 * time.Millisecond, RetryMax: time.Second,
			RequestTimeout: 5 * time.Second, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
	})
	relaytest.WaitFor(t, 30*time.Second, "the relay streams its slot", func() bool {
		var active bool
		_ = pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return active
	})
	return s
}

// operator calls the API over HTTP with the operator token.
func (s *site) operator(method, path string, body any) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, s.srv.URL+"/api/v1"+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		out, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
	}
}

func (s *site) link(tenant string, ttl time.Duration) string {
	s.t.Helper()
	l, err := portal.Link(s.keys, portal.LinkOptions{Tenant: tenant, TTL: ttl, BaseURL: s.srv.URL})
	if err != nil {
		s.t.Fatal(err)
	}
	return l
}

// enqueue commits one event of tenant, as the application does.
func (s *site) enqueue(tenant, aggregate string, payload map[string]any) string {
	s.t.Helper()
	id, err := outbox.Enqueue(context.Background(), s.pool, outbox.Event{TenantID: tenant, AggregateType: "order",
		AggregateID: aggregate, EventType: "order.created", Payload: payload})
	if err != nil {
		s.t.Fatal(err)
	}
	return id.String()
}

// receiver is a partner's server: it answers 200, except the first attempt at an event whose
// payload says "fail", which it answers 503 with a body.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string]int // by webhook-id
	sigs     map[string]int // signatures carried by the last request of each event
}

const refusal = `{"error": "inventory service unavailable, try again later"}`

func newReceiver(t *testing.T) *receiver {
	r := &receiver{attempts: map[string]int{}, sigs: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get("webhook-id")
		r.mu.Lock()
		r.attempts[id]++
		n := r.attempts[id]
		r.sigs[id] = len(strings.Fields(req.Header.Get("webhook-signature")))
		r.mu.Unlock()
		if n == 1 && bytes.Contains(body, []byte(`"fail"`)) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, refusal)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

func (r *receiver) signatures(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sigs[id]
}

// until reloads the page until it shows every text (the relay delivers in the background).
func (b *tab) until(what string, texts ...string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page := b.text()
		missing := ""
		for _, s := range texts {
			if !strings.Contains(page, s) {
				missing = s
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s: the page does not show %q:\n%s", what, missing, page)
		}
		time.Sleep(250 * time.Millisecond)
		b.open(b.location())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, what, cond)
}

// waitText waits, without reloading, until the page shows text (a script changed it).
func (b *tab) waitText(what, text string) {
	b.t.Helper()
	waitFor(b.t, what, func() bool { return strings.Contains(b.text(), text) })
}
