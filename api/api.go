package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
)

// Limits and defaults of the API, documented in docs/guides/api.md.
const (
	// DefaultMaxBodyBytes bounds a request body: 256 KiB.
	DefaultMaxBodyBytes = 256 << 10
	// DefaultLimit is a page's size when limit is not given; MaxLimit the largest allowed.
	DefaultLimit = 100
	MaxLimit     = 1000
	// DefaultTestTimeout bounds the attempt of POST /endpoints/{id}/test.
	DefaultTestTimeout = 10 * time.Second
	// DefaultGrace is how long the old secret keeps signing after a rotate-secret: 24 hours.
	DefaultGrace = 24 * time.Hour
	// MaxGrace bounds it: a week.
	MaxGrace = 7 * 24 * time.Hour
)

// ErrConfig is wrapped by New's refusals of a Config.
var ErrConfig = errors.New("api: bad config")

// Config configures the API. Pool is required, and at least one way in: OperatorTokens,
// SigningKeys or TenantResolver.
type Config struct {
	// Pool is the application's (or the relay's) pool on the database of the relay's tables.
	// Every request is one transaction on it, so any number of API processes serve the same
	// database. Required.
	Pool *pgxpool.Pool
	// Schema is the PostgreSQL schema of the relay's tables. Empty: as the pool's search_path
	// resolves them.
	Schema string
	// OperatorTokens see and change everything (ParseOperatorTokens reads the file's format).
	// Empty: no operator reaches the API.
	OperatorTokens []OperatorToken
	// SigningKeys verify tenant tokens (Keys.Mint makes them). Nil: tenant tokens are refused.
	SigningKeys *Keys
	// TenantResolver, if set, is asked first for every request: when it answers ok, the request
	// acts for that tenant (as a tenant token would), without any token; an application that
	// authenticates its users itself decides with its own session. When it answers !ok, the
	// bearer token decides. Nil: tokens only.
	TenantResolver func(r *http.Request) (tenant string, ok bool)
	// SecretsKeys are the relay's secrets keys (OUTBOX_RELAY_SECRETS_KEY's format): secrets
	// written are sealed with the first, and POST /test signs with the endpoint's secrets,
	// opened with them. Empty: secrets are stored in clear, and a sealed one cannot sign a test.
	SecretsKeys string
	// RelayMetricsAddr is the relay's --metrics-addr, refused as an endpoint URL (as
	// endpoints.Store.RelayMetricsAddr). Empty: not checked here.
	RelayMetricsAddr string
	// Egress is the relay's egress policy (--egress-deny-private, --egress-allow,
	// --egress-https-only), applied to URLs when written and to the test attempt's connection.
	// Endpoints a tenant creates or changes are refused private addresses whatever it says.
	// The zero value: the guard's own rules only.
	Egress endpoints.Egress
	// EgressProxy is the relay's --egress-proxy, for the test attempt. Empty: none (the
	// environment's HTTP_PROXY, as the relay).
	EgressProxy string
	// Resolver looks up the test attempt's host. Nil: net.DefaultResolver.
	Resolver *net.Resolver
	// MaxBodyBytes bounds a request body. Zero: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// TestTimeout bounds the test attempt. Zero: DefaultTestTimeout.
	TestTimeout time.Duration
	// Version is sent in the test attempt's User-Agent (outbox-relay/<Version>). Empty: "api".
	Version string
	// Logger receives a line per failed request (never a token or a secret). The zero value
	// logs nothing.
	Logger zerolog.Logger
	// Registerer receives outbox_relay_api_requests_total and
	// outbox_relay_api_request_duration_seconds. Nil: nowhere.
	Registerer prometheus.Registerer
}

// API is the management API: an http.Handler of the routes under /api/v1. Mount it at
// /api/v1/ (or at /, where it answers only /api/v1) of any server. It holds no state but its
// settings: every request is a transaction on Config.Pool.
type API struct {
	cfg       Config
	operators operatorSet
	store     endpoints.Store
	ring      *seal.Keyring // nil: secrets in clear
	guard     *endpoint.Guard
	mux       *http.ServeMux
	metrics   *metrics
	patterns  []string // the routes' patterns, as registered
}

// New checks cfg and returns the API.
func New(cfg Config) (*API, error) {
	if cfg.Pool == nil {
		return nil, fmt.Errorf("%w: Pool is nil: give the pool of the database that holds the relay's tables", ErrConfig)
	}
	if len(cfg.OperatorTokens) == 0 && cfg.SigningKeys == nil && cfg.TenantResolver == nil {
		return nil, fmt.Errorf("%w: no way in: give operator tokens (--api-tokens-file, OUTBOX_RELAY_API_TOKENS), "+
			"signing keys for tenant tokens (--api-signing-key-file, OUTBOX_RELAY_API_SIGNING_KEY), or a TenantResolver", ErrConfig)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.TestTimeout <= 0 {
		cfg.TestTimeout = DefaultTestTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "api"
	}
	a := &API{cfg: cfg, operators: newOperatorSet(cfg.OperatorTokens), metrics: newMetrics(cfg.Registerer)}
	a.store = endpoints.Store{Schema: cfg.Schema, RelayMetricsAddr: cfg.RelayMetricsAddr, Egress: cfg.Egress}
	if cfg.SecretsKeys != "" {
		sealer, err := endpoints.NewSealer(cfg.SecretsKeys)
		if err != nil {
			return nil, fmt.Errorf("%w: SecretsKeys: %w", ErrConfig, err)
		}
		if a.ring, err = seal.Parse(cfg.SecretsKeys); err != nil {
			return nil, fmt.Errorf("%w: SecretsKeys: %w", ErrConfig, err)
		}
		a.store.Sealer = sealer
	}
	g, err := endpoint.NewGuard(cfg.RelayMetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: RelayMetricsAddr: %w", ErrConfig, err)
	}
	g.Egress = endpoint.Egress(cfg.Egress)
	a.guard = g
	a.mux = http.NewServeMux()
	a.routes()
	return a, nil
}

// handler is a route's function: it writes its answer, or returns an error the API turns into
// a problem (a *Problem as it is; anything else a 500 or 503).
type handler func(w http.ResponseWriter, r *http.Request) error

// route registers pattern (a Go 1.22 ServeMux pattern under /api/v1) with authentication,
// metrics and error answers around h.
func (a *API) route(pattern string, h handler) {
	a.patterns = append(a.patterns, pattern)
	a.mux.Handle(pattern, a.wrap(pattern, h))
}

func (a *API) wrap(pattern string, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusWriter{ResponseWriter: w}
		defer func() { a.metrics.observe(pattern, rec.status, time.Since(start)) }()
		p, err := a.authenticate(r)
		if err != nil {
			writeProblem(rec, problem(http.StatusUnauthorized, typeUnauthorized, ""))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		if err := h(rec, r); err != nil {
			a.fail(rec, r, pattern, err)
		}
	})
}

// fail answers err: a *Problem as it is, a database that cannot be reached 503, anything
// else 500 with a line in the log (the client sees no internal detail).
func (a *API) fail(w http.ResponseWriter, r *http.Request, pattern string, err error) {
	var p *Problem
	if errors.As(err, &p) {
		writeProblem(w, p)
		return
	}
	if unreachable(err) {
		a.cfg.Logger.Warn().Err(err).Str("route", pattern).Msg("api: the database is unavailable")
		writeProblem(w, problem(http.StatusServiceUnavailable, typeUnavailable,
			"the API cannot reach its database: retry in a moment"))
		return
	}
	a.cfg.Logger.Error().Err(err).Str("route", pattern).Str("method", r.Method).Msg("api: request failed")
	writeProblem(w, problem(http.StatusInternalServerError, typeInternal,
		"the request could not be completed; nothing was changed unless it says otherwise: retry, and if it fails "+
			"again the API's log has the cause"))
}

// unreachable reports whether err is the database being unreachable (a connection error, or
// the server shutting down), rather than a statement's failure.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P01" || pgErr.Code == "57P03" // admin_shutdown, cannot_connect_now
	}
	var ne net.Error
	return errors.As(err, &ne) || pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded)
}

// ServeHTTP serves the API's routes; anything else under /api/v1 answers a problem (404, or
// 405 with Allow), and anything outside it 404.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := a.mux.Handler(r); pattern != "" {
		a.mux.ServeHTTP(w, r)
		return
	}
	// The mux's own 404 or 405: let it set the status and Allow, then answer a problem.
	rec := &headerRecorder{h: http.Header{}}
	a.mux.ServeHTTP(rec, r)
	if allow := rec.h.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch rec.status {
	case http.StatusMethodNotAllowed:
		writeProblem(w, problem(http.StatusMethodNotAllowed, typeMethod, fmt.Sprintf("%s is not allowed here: use %s", r.Method,
			rec.h.Get("Allow"))))
	default:
		writeProblem(w, problem(http.StatusNotFound, typeNotFound, "no route "+r.URL.Path+": the API's routes are "+
			"listed by GET /api/v1/openapi.json"))
	}
}

// headerRecorder takes what the mux writes for a request no route serves.
type headerRecorder struct {
	h      http.Header
	status int
}

func (h *headerRecorder) Header() http.Header         { return h.h }
func (h *headerRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerRecorder) WriteHeader(s int)           { h.status = s }

// statusWriter notes the status answered, for the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
