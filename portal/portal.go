package portal

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Defaults of Config, documented in docs/guides/portal.md.
const (
	// DefaultSessionTTL is how long a session lasts when Config.SessionTTL is zero: a working day.
	DefaultSessionTTL = settings.PortalSessionTTL
	// MaxSessionTTL bounds Config.SessionTTL: a session is a credential.
	MaxSessionTTL = 7 * 24 * time.Hour
	// DefaultLinkTTL is a portal link's lifetime when LinkOptions.TTL is zero.
	DefaultLinkTTL = 15 * time.Minute
	// MaxLinkTTL bounds a link's lifetime: a link is meant to be opened at once.
	MaxLinkTTL = 24 * time.Hour
	// PageSize is how many endpoints, deliveries or audit records a page shows.
	PageSize = 50
)

// ErrConfig is wrapped by New's refusals of a Config.
var ErrConfig = errors.New("portal: bad config")

// Config configures the pages. API and Pool are required.
type Config struct {
	// API is the management API the pages are a client of: every change and every read of an
	// endpoint goes through it, in-process, for the signed-in tenant or operator. Required.
	API *api.API
	// Pool is the pool of the database of the relay's tables: the sessions live there
	// (outbox_portal_sessions), and the console reads its overview of every endpoint and the
	// pipelines' slots from it. Required; the API's pool serves.
	Pool *pgxpool.Pool
	// Schema is the PostgreSQL schema of the relay's tables. Empty: as the pool's search_path
	// resolves them.
	Schema string
	// SigningKeys verify portal links (Link mints them), the keys of tenant tokens. Nil: no
	// portal link opens a session; the console still works.
	SigningKeys *api.Keys
	// Prefix is the path the pages are served under: the portal at Prefix+"/portal/", the
	// console at Prefix+"/console/". Mount the Portal at Prefix+"/" of a server. Empty: the
	// root, as `outbox-relay api` serves them. It starts with "/" and does not end with one.
	Prefix string
	// SessionTTL is how long a session lasts from its sign-in (a sign-out ends it sooner), 1m to
	// MaxSessionTTL. Zero: DefaultSessionTTL.
	SessionTTL time.Duration
	// FrameAncestors are the sources allowed to show the pages in a frame (the CSP directive
	// frame-ancestors, e.g. "https://app.example"), so an application can embed the portal in
	// its own page. Nil: none, no page may frame them.
	FrameAncestors []string
	// Pipelines are the pipelines the console reports (slot, lag, position). Nil: every slot of
	// this database whose name the relay gives (outbox_relay, outbox_relay_*).
	Pipelines []Pipeline
	// Title is the name the pages show in their header and title. Empty: "Webhooks".
	Title string
	// Logger receives a line per page that failed on the server (never a token, a cookie or a
	// secret). The zero value logs nothing.
	Logger zerolog.Logger
}

// Pipeline names a pipeline for the console: Name as the relay's --config names it, Slot its
// replication slot.
type Pipeline struct {
	Name, Slot string
}

// Portal serves the partner portal (/portal/) and the operator console (/console/): web pages
// rendered on the server, a client of the management API. It is an http.Handler; it holds no
// state but its settings, the sessions being rows of the database, so any number of processes
// serve the same sessions.
type Portal struct {
	cfg    Config
	call   caller
	pages  *pages
	mux    *http.ServeMux
	header http.Header
}

// New checks cfg and returns the pages.
func New(cfg Config) (*Portal, error) {
	switch {
	case cfg.API == nil:
		return nil, fmt.Errorf("%w: API is nil: the pages are a client of the management API (api.New)", ErrConfig)
	case cfg.Pool == nil:
		return nil, fmt.Errorf("%w: Pool is nil: give the pool of the database of the relay's tables", ErrConfig)
	case cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")):
		return nil, fmt.Errorf("%w: Prefix %q: start it with / and end it without one, e.g. /webhooks", ErrConfig, cfg.Prefix)
	case cfg.SessionTTL < 0 || (cfg.SessionTTL > 0 && cfg.SessionTTL < time.Minute) || cfg.SessionTTL > MaxSessionTTL:
		return nil, fmt.Errorf("%w: SessionTTL %s: use 1m to %s (or zero for %s)", ErrConfig, cfg.SessionTTL, MaxSessionTTL, DefaultSessionTTL)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Title == "" {
		cfg.Title = "Webhooks"
	}
	fa, err := frameAncestors(cfg.FrameAncestors)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	pg, err := loadPages()
	if err != nil {
		return nil, err
	}
	p := &Portal{cfg: cfg, call: caller{api: cfg.API}, pages: pg, mux: http.NewServeMux(), header: securityHeaders(fa)}
	p.routes()
	return p, nil
}

// ServeHTTP serves the pages under Config.Prefix.
func (p *Portal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range p.header {
		w.Header()[k] = v
	}
	p.mux.ServeHTTP(w, r)
}
