package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// The operator token and the signing key of the tests; a second key signs tokens the API does
// not know.
const (
	opToken    = "op-token-0123456789abcdefghij"
	signingKey = "mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U="
	otherKey   = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	secretsKey = "q7d3bXHgf3wE2Q1r2mS9c0dYp8k2QmFvQ1h6d3l4cE0="
)

// env is a migrated database and the API served on it.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
	keys *api.Keys
}

func newEnv(t *testing.T, mutate ...func(*api.Config)) *env {
	t.Helper()
	_, pool := relaytest.MigratedDB(t)
	keys, err := api.ParseKeys(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "ops", Token: opToken}}, SigningKeys: keys,
		SecretsKeys: secretsKey}
	for _, m := range mutate {
		m(&cfg)
	}
	h, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, srv: srv, keys: keys}
}

// tenant mints a tenant token valid for an hour.
func (e *env) tenant(name string) string {
	e.t.Helper()
	tok, err := e.keys.Mint(api.Token{Tenant: name, TTL: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// answer is a response: its status, headers and body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %s", a.status, a.body)
	}
	return m
}

// do sends a request with token as bearer ("" for none) and body (nil for none; a string is
// sent as it is, anything else as JSON).
func (e *env) do(method, path, token string, body any, headers ...string) answer {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// must sends the request and fails the test unless it answers status.
func (e *env) must(status int, method, path, token string, body any, headers ...string) map[string]any {
	e.t.Helper()
	a := e.do(method, path, token, body, headers...)
	if a.status != status {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.body, status)
	}
	if len(a.body) == 0 {
		return nil
	}
	return a.json(e.t)
}
