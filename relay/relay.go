package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/diagnose"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/internal/tracing"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/signature"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/pgstore"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Config is everything `outbox-relay run` takes. It has one of two forms. Either Pipelines
// lists the pipelines (`--config`), or it is empty and the default-pipeline fields (WebhookURL,
// Secrets, Scheme, Slot, Publication, RetryMin, RetryMax, RequestTimeout, MaxInFlight,
// MaxAttempts, MaxBufferedEvents, MaxBufferedBytes, NoBackfill, Delivery, Destination, Shards,
// Control.OnGone) describe the one pipeline named "default" (the flag path). New refuses a
// Config that sets both. The other fields are the process's and apply to every pipeline.
type Config struct {
	// DSN is the PostgreSQL connection string (--dsn, DB_DSN) of the marks, the control rows and
	// the setup; the stream's too unless ReplicationDSN is set. Required.
	DSN string
	// Schema is the PostgreSQL schema of the relay's tables (--schema): the publication carries
	// its outbox_events, the stream decodes only that table, and every other query names that
	// schema's tables. Empty: the connection's current_schema(), resolved once at start.
	Schema string
	// WebhookURL is the default pipeline's webhook (see Pipeline.WebhookURL). Required unless
	// Destination is set or Pipelines is.
	WebhookURL string
	// Secrets sign the default pipeline's requests, the first is current. Required with
	// WebhookURL.
	Secrets []string
	// Scheme is the default pipeline's signature scheme; the zero value is
	// signature.SchemeXSignature.
	Scheme signature.Scheme
	// Slot and Publication name the default pipeline's slot and publication. Empty:
	// outbox_relay (DefaultSlot, DefaultPublication).
	Slot        string
	Publication string
	// MetricsAddr, if set, is an address the relay listens on itself to serve Handler (the
	// CLI's --metrics-addr, :9187). Empty: no HTTP server; a program mounts Handler instead.
	MetricsAddr string
	// RetryMin and RetryMax are the default pipeline's first and largest retry delay. Zero: 1s
	// and 10m.
	RetryMin, RetryMax time.Duration
	// RequestTimeout bounds each of the default pipeline's attempts. Zero: 10s.
	RequestTimeout time.Duration
	// MaxInFlight is the default pipeline's number of concurrent deliveries. Zero: 64
	// (DefaultMaxInFlight).
	MaxInFlight int
	// MaxAttempts dead-letters an event of the default pipeline after this many attempts: 0
	// means about a day of retries at RetryMax (AttemptsForADay), a negative value retries
	// forever.
	MaxAttempts int
	// MaxBufferedEvents and MaxBufferedBytes bound what the default pipeline has received and
	// not yet delivered. Zero: 8192 and 32 MiB.
	MaxBufferedEvents int
	MaxBufferedBytes  int
	// ShutdownTimeout bounds how long a stop waits for deliveries under way. Zero: 10s
	// (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// StallTimeout: /readyz fails when an event has waited this long with nothing delivered
	// meanwhile, unless only paused endpoints, or endpoints whose last attempt failed, hold
	// events (each has its own series and alert: readiness is about the relay). Zero: 3m
	// (DefaultStallTimeout).
	StallTimeout time.Duration
	// StatusInterval is the longest gap between status updates to the server. Zero: a third of
	// wal_sender_timeout, at most 10s.
	StatusInterval time.Duration
	// ReplicationTimeout declares the replication connection dead after this long with nothing
	// from the server, probes included (see cdc.Config.ReplicationTimeout); it is also the
	// TCP_USER_TIMEOUT of every connection the relay opens. If zero, the server's
	// wal_sender_timeout, or 60s when that is 0.
	ReplicationTimeout time.Duration
	// Retention, if positive, deletes the rows every pipeline is done with (outbox.Prune) older
	// than this, hourly in the background. Zero keeps them.
	Retention time.Duration
	// NoBackfill turns off the default pipeline's backfill. If false (the default), whenever
	// the relay creates the slot it records the rows still pending, which the new slot cannot
	// carry, and delivers them first.
	NoBackfill bool
	// RecreateSlot drops a slot no process streams from (an invalidated one always) and creates
	// it again, with a backfill. If false, an invalidated slot is an error naming this option.
	RecreateSlot bool
	// LogPayloads logs the payload of failed attempts. False: never (payloads may hold
	// personal data).
	LogPayloads bool
	// PollInterval is how often the database-only gauges are refreshed. If zero, 15s.
	PollInterval time.Duration
	// Version and Commit label outbox_relay_build_info and the webhook's User-Agent. Empty:
	// empty labels, User-Agent "outbox-relay/".
	Version string
	Commit  string
	// Logger receives the relay's log lines. The zero value logs nothing.
	Logger zerolog.Logger
	// Registerer receives every series, the Go and process collectors included (a collector
	// already registered there is shared). Nil: a new prometheus.Registry, which is also
	// Gatherer. Give each Relay its own, or one wrapped with a distinguishing label.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves (Handler, MetricsAddr). Nil: Registerer, when it is a
	// Gatherer (a *prometheus.Registry is); New refuses a Registerer that is not, without one.
	Gatherer prometheus.Gatherer
	// Ready, if set, is called with the metrics server's address once it listens (MetricsAddr
	// ":0" picks a free port). Nil: not called.
	Ready func(metricsAddr string)
	// TracerProvider, if set, traces the relay's work with OpenTelemetry: a span for each
	// transaction's decode and one for each delivery attempt, a child of the trace context the
	// event's producer stored, whose traceparent the attempt's request carries
	// (docs/operations/tracing.md). The CLI builds one from --otel-endpoint and the OTEL_*
	// environment; a program passes its own and shuts it down once Run has returned. Nil (the
	// default): nothing is traced, and the delivery path has no tracing code in it at all.
	TracerProvider trace.TracerProvider
	tracer         trace.Tracer // built by New from TracerProvider; nil without one

	// Failover is --failover: the zero value cdc.FailoverAuto makes the slot a failover slot on
	// PostgreSQL 17+ (docs/guides/failover.md).
	Failover cdc.FailoverMode
	// ReplicationDSN is --replication-dsn: if set, the slot lives on and is decoded by that
	// server (a hot standby, PostgreSQL 16+), while setup checks, marks, replays and status use
	// DSN. Empty: everything uses DSN.
	ReplicationDSN string

	// Delivery is the default pipeline's request format, batching, compression and marks mode
	// (--format, --batch-*, --compression, --marks). The zero value is raw, one event per
	// request, uncompressed, rows marked done.
	Delivery Delivery
	// Destination replaces the webhook for the default pipeline (see Pipeline.Destination;
	// docs/guides/brokers.md). Nil: the webhook of WebhookURL, Secrets and Scheme.
	Destination destination.Opener
	// Endpoints is --endpoints: the default pipeline delivers to the partner endpoints of
	// outbox_endpoints instead of one webhook (see Pipeline.Endpoints). False: one destination.
	Endpoints bool
	// SecretsKeys opens the sealed secrets of partner endpoints: the keys' text, as
	// OUTBOX_RELAY_SECRETS_KEY or the file of --secrets-key-file holds it (endpoints.NewSealer).
	// Empty: no key; an endpoint with a sealed secret then fails every attempt with the fix.
	SecretsKeys string
	// EndpointMetrics are endpoint ids whose series are always exported; EndpointMetricsMax
	// bounds the others to that many endpoints in trouble (--endpoint-metrics,
	// --endpoint-metrics-max). Zero EndpointMetricsMax: 20; negative: none.
	EndpointMetrics    []string
	EndpointMetricsMax int
	// DeliveryLogRetention is how long the delivery log of endpoints (failed attempts, and
	// when each event was delivered: `outbox-relay deliveries`) is kept; older entries are
	// pruned in the background. Zero: 7 days; negative: nothing is recorded.
	DeliveryLogRetention time.Duration
	// Breaker, Backlog and DeliveryLog are the default pipeline's (see Pipeline.Breaker).
	Breaker, Backlog, DeliveryLog bool
	// SpillAfter and SpillSize are the default pipeline's (see Pipeline.SpillAfter).
	SpillAfter time.Duration
	SpillSize  int
	// EndpointDisableAfter is the default pipeline's (see Pipeline.EndpointDisableAfter).
	EndpointDisableAfter time.Duration
	// OperatorWebhookURL, if set, receives the endpoints' operational events, endpoint.disabled
	// and endpoint.recovered, as JSON POSTs signed with OperatorWebhookSecret in the X-Signature
	// scheme (--operator-webhook-url, --operator-webhook-secret; docs/guides/endpoints.md).
	// Empty: none. The secret is required with the URL; comma-separated for rotation.
	OperatorWebhookURL    string
	OperatorWebhookSecret string
	// Egress is the egress policy of partner endpoints (--egress-deny-private, --egress-allow,
	// --egress-https-only; docs/guides/endpoint-egress.md), applied to each endpoint's URL when
	// its row is read and to every address it connects to. Give endpoints.Store the same, so a
	// URL the relay would refuse is refused when it is written. The zero value: the guard's
	// own rules (link-local, metadata, "this host", the metrics address) for operators'
	// endpoints, and the private ranges too for endpoints with deny_private.
	Egress endpoints.Egress
	// EgressProxy, if set, is the outbound proxy of partner endpoints (--egress-proxy): an
	// http:// or https:// URL, with user:password if it needs them; every endpoint connects
	// through it (a CONNECT tunnel to the address the relay resolved and checked) unless its
	// row's egress_proxy names another or "direct". A failure of the proxy is retried and not
	// counted against the endpoint. Empty: endpoints connect directly, or through the
	// environment's HTTPS_PROXY / HTTP_PROXY when those apply to their URL.
	EgressProxy string
	// Resolver looks up the hosts of partner endpoints. Nil: net.DefaultResolver.
	Resolver     *net.Resolver
	operator     *operatorHook // built by New from the two above; nil without a URL
	metricsBound string        // the address MetricsAddr bound, once it listens

	// Pipelines, if not empty, are the pipelines this process runs (`--config`), each with its
	// own slot, publication, destination and policies; the default-pipeline fields above must
	// then be left zero (New refuses them). Empty (the default): one pipeline named "default" from those fields, on slot and
	// publication outbox_relay unless Slot and Publication say otherwise.
	Pipelines []Pipeline
	// Shard is --shard: if set, the one shard this process runs of every sharded pipeline that
	// does not name its own (Pipeline.Shard), or of the default pipeline split by Shards. Nil:
	// every shard.
	Shard *int
	// Shards is --shards: the default pipeline (Pipelines empty) is split into this many shards,
	// as Pipeline.Shards splits one of a file (slots outbox_relay_s<i>of<N> unless Slot says
	// otherwise). 0 or 1: not sharded. A default-pipeline field.
	Shards int
	// Control is the default pipeline's 410 Gone setting and every pipeline's control-row poll
	// interval (see ControlConfig).
	Control ControlConfig
	// ExitOnConfigError makes Run return, at start and while streaming, when the database
	// cannot be reached for a reason in the configuration: the database or the role does not
	// exist, the password is wrong, the role may not connect, the host name does not resolve,
	// the connection requires TLS the server does not offer (or a certificate it cannot
	// verify), or the connection has been refused for a minute (--exit-on-config-error, for a
	// supervisor that restarts and alerts). False: the relay keeps retrying, as for an outage,
	// logging the cause and the fix at every attempt, and /readyz answers 503 with the same.
	ExitOnConfigError bool
}

// newDestination opens the pipeline's destination (p.Destination, or the webhook of WebhookURL
// when that is nil); release releases it. A broker's start-up check (its stream exists) happens
// here, and an unreachable broker is waited for until ctx ends.
func newDestination(ctx context.Context, cfg Config, p Pipeline) (dest destination.Destination, release func(), err error) {
	if err := checkDestination(p); err != nil {
		return nil, nil, err
	}
	if p.Endpoints {
		return nil, func() {}, nil // each endpoint's destination is opened by the fan-out
	}
	if p.Destination != nil {
		return destination.Open(ctx, p.Destination, destination.OpenOptions{Pipeline: p.Name,
			RequestTimeout: p.RequestTimeout, Logger: slog.New(zerolog.NewSlogHandler(cfg.pipelineLogger(p)))})
	}
	hook, err := webhook.New(webhook.Config{URL: p.WebhookURL, Secrets: p.Secrets,
		Scheme: p.Scheme, Timeout: p.RequestTimeout, MaxConns: p.MaxInFlight, UserAgent: "outbox-relay/" + cfg.Version,
		Format: p.Delivery.Format, Source: p.Delivery.Source, DefaultSource: "/outbox-relay/" + p.Name,
		Compression: p.Delivery.Compression})
	if err != nil {
		return nil, nil, err
	}
	return hook, hook.Close, nil
}

// checkDestination checks the destination settings that need no connection, so that New
// refuses them before anything starts.
func checkDestination(p Pipeline) error {
	if p.Destination == nil {
		return nil
	}
	if err := settings.OneDestination(p.destinations()...); err != nil {
		return err
	}
	if p.Delivery.Format != "" && p.Delivery.Format != webhook.FormatRaw ||
		p.Delivery.Compression != "" && p.Delivery.Compression != webhook.CompressionNone {
		return errors.New("the CloudEvents format and request compression are webhook settings: a broker destination " +
			"sends one message per event with the webhook contract's headers (a batch is many messages sent at once), so leave them unset")
	}
	if v, ok := p.Destination.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// Defaults for Config fields left zero.
const (
	DefaultSlot              = settings.Slot
	DefaultPublication       = settings.Publication
	DefaultMaxInFlight       = settings.MaxInFlight
	DefaultMaxBufferedEvents = settings.MaxBufferedEvents
	DefaultMaxBufferedBytes  = settings.MaxBufferedBytes
	DefaultShutdownTimeout   = settings.ShutdownTimeout
	DefaultStallTimeout      = settings.StallTimeout
)

func (c *Config) defaults() {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&c.MaxInFlight, DefaultMaxInFlight)
	set(&c.MaxBufferedEvents, DefaultMaxBufferedEvents)
	set(&c.MaxBufferedBytes, DefaultMaxBufferedBytes)
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.Registerer == nil && c.Gatherer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = reg, reg
	}
	if g, ok := c.Registerer.(prometheus.Gatherer); ok && c.Gatherer == nil {
		c.Gatherer = g
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = AttemptsForADay(c.RetryMin, c.RetryMax)
	}
	c.Control.defaults()
}

// AttemptsForADay is the number of attempts whose backoff delays, doubling from lo up to hi,
// add up to about 24 hours: what MaxAttempts 0 means. A zero lo or hi is 1s or 10m.
func AttemptsForADay(lo, hi time.Duration) int { return settings.AttemptsForADay(lo, hi) }

// checks are what precede every pipeline's start, and return r.cfg with the schema of the
// relay's tables resolved: it is resolved once (a database not reachable yet is waited for,
// while /healthz and /readyz answer), so that every component of every pipeline names it and
// none depends on a search_path. Then every filter is checked before anything is created, so a
// refused one leaves nothing behind; then the shard counts.
func (r *runner) checks(ctx context.Context) (Config, error) {
	cfg := r.cfg
	var err error
	report := notReady(cfg.Logger, r.starts...) // each pipeline's /readyz says why too
	if cfg.Schema, err = resolveSchemaWithRetry(ctx, cfg, report); err != nil {
		return cfg, err
	}
	pipes := make([]Pipeline, len(r.starts))
	for i, s := range r.starts {
		pipes[i] = s.p
	}
	if err := validateFiltersWithRetry(ctx, cfg, pipes, report); err != nil {
		return cfg, err
	}
	return cfg, checkShardCountsWithRetry(ctx, cfg, pipes, report) // a stop meanwhile: runPipelines ends cleanly
}

// named prefixes err with the pipeline's name when the pipelines come from Config.Pipelines
// (the flag path's one pipeline keeps today's messages).
func (c *Config) named(p Pipeline, err error) error {
	if len(c.Pipelines) == 0 {
		return err
	}
	return fmt.Errorf("pipeline %q: %w", p.Name, err)
}

// pipelineLogger is the process's logger with the pipeline's name (and shard) on every line.
func (c *Config) pipelineLogger(p Pipeline) zerolog.Logger {
	if p.shard.of > 0 {
		return c.Logger.With().Str("pipeline", p.family()).Int("shard", p.shard.index).Int("shards", p.shard.of).Logger()
	}
	return c.Logger.With().Str("pipeline", p.Name).Logger()
}

// validateFiltersWithRetry has PostgreSQL check every pipeline's row filter, waiting for a
// database that is not reachable yet; a refused filter is permanent.
func validateFiltersWithRetry(ctx context.Context, cfg Config, pipes []Pipeline, report func(error, time.Duration)) error {
	filters := map[string]string{}
	for _, p := range pipes {
		filters[p.Name] = p.Filter
	}
	gate := newConfigGate(cfg)
	return retry.Do(ctx, startBackoff, func(ctx context.Context) error {
		_, err := cdc.ValidateFilters(ctx, cfg.DSN, cfg.Schema, filters)
		if errors.Is(err, cdc.ErrFilter) {
			return retry.Stop(err)
		}
		return gate.check(err)
	}, report)
}

// stoppedDuringStartup reports whether ctx ended (SIGINT or SIGTERM) while a start-up step was
// under way: then err, if any, is only the cancellation (a lookup cut short), and the stop is
// clean. An error that is not a cancellation is never hidden.
func stoppedDuringStartup(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err()))
}

// newPool opens the pool of the marker, the poller, the store and retention, on sockets that
// notice a dead peer (see dialer).
func newPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.DialFunc = dialer(userTimeout(cfg))
	return pgxpool.NewWithConfig(ctx, pc)
}

// userTimeout is the TCP_USER_TIMEOUT of the relay's connections: the replication timeout, or
// its default when the server decides it.
func userTimeout(cfg Config) time.Duration {
	if cfg.ReplicationTimeout > 0 {
		return cfg.ReplicationTimeout
	}
	return cdc.DefaultReplicationTimeout
}

// permanent reports whether a setup error needs the operator: a retry cannot fix it.
func permanent(err error) bool {
	for _, target := range []error{cdc.ErrWalLevel, cdc.ErrNoOutboxTable, cdc.ErrNoReplication, cdc.ErrSlotInvalid,
		cdc.ErrSlotMismatch, cdc.ErrNoPrivilege, cdc.ErrSchema, cdc.ErrPublicationMissing,
		cdc.ErrFailoverUnsupported, cdc.ErrStandbyUnsupported, cdc.ErrBadDSN, cdc.ErrFilter, cdc.ErrPublicationTable,
		cdc.ErrMoveBroken} {
		if errors.Is(err, target) {
			return true
		}
	}
	if _, ok := diagnose.Connect(err); ok {
		return false // a failed connection is retried, or not, by its diagnosis (configGate)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Authentication (class 28), unknown database and missing privilege need the operator.
		return pgerrcode.IsInvalidAuthorizationSpecification(pgErr.Code) || pgErr.Code == pgerrcode.InvalidCatalogName ||
			pgErr.Code == pgerrcode.InsufficientPrivilege
	}
	return false
}

func logSetup(log zerolog.Logger, cfg Config, p Pipeline, s cdc.SetupResult) {
	if s.FilterChanged {
		log.Warn().Str("publication", p.Publication).Str("old_filter", s.OldFilter).Str("new_filter", s.Filter).
			Msg("row filter changed; the new filter applies to rows committed from now on")
	}
	if s.PublicationCreated {
		log.Info().Str("publication", p.Publication).Msg("publication created")
	}
	if s.SlotRecreated {
		log.Warn().Str("slot", p.Slot).Str("reason", s.SlotRecreatedWhy).Int("backfill", s.Backfill).
			Msg("SLOT DROPPED AND RECREATED; pending rows are backfilled, and events delivered but not yet marked done may arrive again")
	}
	if s.SlotCreated {
		log.Info().Str("slot", p.Slot).Int("backfill", s.Backfill).Bool("no_backfill", !p.Backfill).
			Msg("replication slot created")
	}
	if s.Backfill > 0 && !s.CommitOrder {
		log.Warn().Int("backfill", s.Backfill).Msg("backfill delivers in insertion order; across overlapping transactions " +
			"that is not always commit order: commit order needs track_commit_timestamp = on")
	}
	if f := s.Failover; f.Supported {
		log.Info().Str("slot", p.Slot).Bool("failover", f.On).Bool("changed", f.Changed).Bool("pending", f.Pending).
			Msg("failover slot setting")
	}
	if cfg.ReplicationDSN != "" {
		log.Info().Str("slot", p.Slot).Msg("decoding on the --replication-dsn server; marks and replays use the primary")
	}
	if m := s.Move; m != nil {
		log.Warn().Str("slot", p.Slot).Str("from", m.From).Str("to", m.To).Str("fence", m.Fence.String()).
			Msg("SLOT MOVING: the slot still lives on another server; it delivers up to the new slot's start (the fence), " +
				"then it is dropped and decoding goes on here")
	}
	log.Info().Str("slot", p.Slot).Str("publication", p.Publication).Str("filter", s.Filter).
		Int("max_in_flight", p.MaxInFlight).
		Int("max_buffered_events", p.MaxBufferedEvents).Int("max_buffered_bytes", p.MaxBufferedBytes).
		Int("max_attempts", p.MaxAttempts).Bool("shadow", p.Shadow).Int("rate_limit", p.RateLimit).
		Str("signature_scheme", p.Scheme.String()).Msg("relay starting")
}

// runner holds the process's pipelines and what they share: the pool, the registry and the
// metrics server.
type runner struct {
	cfg    Config
	pool   *pgxpool.Pool
	starts []*pipelineStart // every pipeline, in order, from before it starts
}

// pipelineRunner holds the wired components of one pipeline.
type pipelineRunner struct {
	cfg     Config
	p       Pipeline
	log     zerolog.Logger
	m       *metrics.Metrics // the pipeline's own gauges: the tracker's, and the poller's
	tracker *cdc.Tracker
	stream  *cdc.Stream
	pub     deliverer
	marker  *pgstore.Marker      // nil unless the pipeline owns the rows' status
	dlog    *pgstore.DeliveryLog // nil unless the pipeline records a delivery log (endpoints, or DeliveryLog)
	poller  *inspect.Poller
	pool    *pgxpool.Pool // the control row, a pause on 410 Gone
	pubOID  uint32        // the publication's oid when the run started (0: unknown)
	lastAck atomic.Int64  // unix nanos of the last delivery
	// closeDest releases the destination (set by pipelineStart.start).
	closeDest func()
}

// newPipelineRunner builds the components of one pipeline, each registering its series on reg
// labelled pipeline=<name>. It connects nowhere: dest and pool are used once run starts. owner
// says whether it writes the rows' status columns (see StatusOwner).
func newPipelineRunner(cfg Config, p Pipeline, owner bool, reg prometheus.Registerer, dest destination.Destination,
	pool *pgxpool.Pool) *pipelineRunner {
	reg = prometheus.WrapRegistererWith(p.labels(), reg)
	log := cfg.pipelineLogger(p)
	r := &pipelineRunner{cfg: cfg, p: p, log: log, m: metrics.New(reg), pool: pool,
		tracker: cdc.NewTracker(p.MaxBufferedEvents, p.MaxBufferedBytes)}
	r.lastAck.Store(time.Now().UnixNano())
	streamDSN := cfg.DSN
	if cfg.ReplicationDSN != "" {
		streamDSN = cfg.ReplicationDSN
	}
	r.stream = cdc.NewStream(cdc.Config{DSN: streamDSN, Slot: p.Slot, Publication: p.Publication, Schema: cfg.Schema,
		StatusInterval: cfg.StatusInterval, ReplicationTimeout: cfg.ReplicationTimeout,
		Dial: dialer(userTimeout(cfg)), Logger: log, Registerer: reg, AllowStandby: cfg.ReplicationDSN != "", Move: p.move,
		ExitOnConfigError: cfg.ExitOnConfigError, Tracer: tracing.Decode(cfg.tracer, p.Name)}, r.tracker)
	// Every pipeline registers the marker's series, so the set of series does not depend on
	// which pipeline owns the status; only the owner's marker runs.
	mc := pgstore.MarkerConfig{Logger: log, Registerer: reg, Schema: cfg.Schema}
	if p.Endpoints {
		// An event is done once every endpoint it routes to has it, so done-marks come at the
		// pace of the slowest of them: a longer interval keeps each UPDATE a full batch instead
		// of many small ones (measured: 13 statements per 1k events at a fan-out of 10, 2 at 1).
		mc.Interval = endpointMarkInterval
	}
	marker := pgstore.NewMarker(pool, mc)
	var marks store.Marks
	var resume *publisher.Resume
	if owner && p.Delivery.Marks != publisher.MarksOff {
		// With marks off nothing is marked, so nothing reads as delivered after a restart: no
		// resume lookups either.
		r.marker, marks, resume = marker, marker, &publisher.Resume{Delivered: marker.Delivered}
	}
	r.poller = inspect.NewPoller(pool, cfg.Schema, p.Slot, r.m, cfg.PollInterval, log)
	if p.Endpoints {
		r.dlog = newDeliveryLog(cfg, log, reg, pool)
		r.pub = newFanout(cfg, p, owner, reg, pool, r, marks, resume, r.tracker.Confirmable, r.dlog, r.stream)
		r.pub.Pause("starting: reading the pipeline's control row")
		return r
	}
	dest = tracing.Destination(dest, cfg.tracer, tracing.Target{Pipeline: p.Name, Producer: p.Destination != nil})
	pc := publisher.Config{MaxInFlight: p.MaxInFlight, RetryMin: p.RetryMin,
		RetryMax: p.RetryMax, ShutdownTimeout: cfg.ShutdownTimeout, Logger: log, Registerer: reg,
		MaxAttempts: p.MaxAttempts, LogPayloads: cfg.LogPayloads,
		Store:    pgstore.Pipeline{Pool: pool, Pipeline: p.Name, OwnState: !owner, Schema: cfg.Schema},
		Pipeline: p.Name, Shadow: p.Shadow, RateLimit: p.RateLimit, Shard: p.shard.index, Shards: p.shard.of,
		BackfillSlot: p.Slot, Batch: p.Delivery.Batch, Resume: resume,
		OnGone: p.OnGone, RecordPause: r.recordPause, NoBreaker: !p.Breaker, Slot: r.stream}
	if p.Backlog {
		pc.Backlog = pgstore.Backlog{Pool: pool, Pipeline: p.Name, Schema: cfg.Schema}
		pc.SpillAfter, pc.SpillSize, pc.Confirmed = p.SpillAfter, p.SpillSize, r.tracker.Confirmable
	}
	if p.DeliveryLog {
		r.dlog = newDeliveryLog(cfg, log, reg, pool)
		pc.DeliveryLog = deliveryLogOf(r.dlog)
	}
	r.pub = publisher.New(pc, dest, r, marks)
	// Nothing is sent before the control row says whether the pipeline is paused.
	r.pub.Pause("starting: reading the pipeline's control row")
	return r
}

// Ack passes a settled event to the tracker and notes the time, for the stall check.
func (r *pipelineRunner) Ack(tx *cdc.Tx, m *envelope.Message) {
	r.tracker.Ack(tx, m)
	r.lastAck.Store(time.Now().UnixNano())
}

// AckControl passes a settled control record to the tracker.
func (r *pipelineRunner) AckControl(tx *cdc.Tx) { r.tracker.AckControl(tx) }

// Grow passes a replay's events to the tracker.
func (r *pipelineRunner) Grow(tx *cdc.Tx, ms []*envelope.Message) { r.tracker.Grow(tx, ms) }

// run starts every pipeline and the process's servers under one errgroup and waits for all of
// them. The metrics server answers until every pipeline's marker is done.
func (r *runner) run(ctx context.Context) error {
	srv, ln, err := r.listen()
	if err != nil {
		return err
	}
	// stopCtx ends on shutdown, or early when a pipeline or the HTTP server fails for good.
	stopCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var g errgroup.Group
	var markers sync.WaitGroup
	// The operator's webhook outlives the pipelines, to send what their stop leaves queued.
	opCtx, stopOp := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOp()
	if op := r.cfg.operator; op != nil {
		g.Go(func() error { op.run(opCtx); return nil })
	}
	markers.Add(1)
	g.Go(func() error {
		defer markers.Done()
		defer stopOp()
		err := r.runPipelines(stopCtx, &markers)
		if err != nil {
			stopAll()
		}
		return err
	})
	if srv != nil {
		g.Go(func() error {
			err := r.serve(srv, ln)
			if err != nil {
				stopAll()
			}
			return err
		})
		g.Go(func() error {
			markers.Wait()
			r.shutdownHTTP(srv)
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		r.cfg.Logger.Info().Float64("delivered", gathered(r.cfg.Gatherer, "outbox_relay_events_delivered_total")).
			Float64("received", gathered(r.cfg.Gatherer, "outbox_relay_events_received_total")).Msg("relay stopped")
	}
	return err
}

// runPipelines runs the checks, then starts retention and every pipeline, each in its own
// goroutine, and waits for them; the first permanent error is returned. markers is done for each pipeline once
// its marker has flushed.
func (r *runner) runPipelines(ctx context.Context, markers *sync.WaitGroup) error {
	cfg, err := r.checks(ctx)
	if stoppedDuringStartup(ctx, err) {
		// Stopped while the checks waited for the database: a clean stop, not an error.
		r.cfg.Logger.Info().Msg("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	stopCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var g errgroup.Group
	if cfg.Retention > 0 {
		// Started once the schema is resolved: it prunes that schema's outbox_events.
		g.Go(func() error {
			err := retention(cfg).Run(stopCtx, r.pool)
			if err != nil {
				stopAll()
			}
			return err
		})
	}
	if r.hasDeliveryLog() && cfg.DeliveryLogRetention >= 0 {
		g.Go(func() error { pruneDeliveryLog(stopCtx, cfg, r.pool); return nil })
	}
	for _, s := range r.starts {
		markers.Add(1)
		g.Go(func() error {
			defer markers.Done()
			err := s.run(stopCtx, cfg, r.pool)
			if err == nil || stoppedDuringStartup(stopCtx, err) {
				return nil // stopped, or stopped by another pipeline's error: that one is returned
			}
			stopAll()
			return r.cfg.named(s.p, err)
		})
	}
	return g.Wait()
}

// run runs one pipeline until ctx ends or it fails for good. The stop goes in order: the stream
// and the publisher stop taking, the publisher drains and closes drained, after which the
// stream confirms its final position; then the marker flushes what the drain delivered. A
// permanent error of the stream ends the pipeline's own components.
func (r *pipelineRunner) run(ctx context.Context) error {
	// The publication as Setup left it: a drop or a replacement from now on is noticed
	// (watchPublication), even one that happens before the stream first streams.
	r.pubOID = r.publicationOID(ctx)
	txs := make(chan *cdc.Tx, 64)
	drained := make(chan struct{})
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	// markerCtx outlives streamCtx: it ends once the stream and the publisher have returned.
	markerCtx, stopMarker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMarker()
	var g errgroup.Group
	var path sync.WaitGroup // the stream and the publisher
	path.Add(2)
	g.Go(func() error {
		defer path.Done()
		err := r.stream.Run(streamCtx, txs, drained)
		stop()
		return err
	})
	g.Go(func() error {
		defer path.Done()
		defer close(drained)
		r.pub.Run(streamCtx, txs)
		return nil
	})
	if r.marker != nil {
		g.Go(func() error { return r.marker.Run(markerCtx) })
	}
	if r.dlog != nil {
		g.Go(func() error { return r.dlog.Run(markerCtx) }) // like the marker: it writes what the drain delivered
	}
	g.Go(func() error {
		path.Wait()
		stopMarker()
		return nil
	})
	g.Go(func() error {
		r.gauges(streamCtx)
		return nil
	})
	g.Go(func() error { return r.poller.Run(streamCtx) })
	g.Go(func() error { r.control(streamCtx, stop); return nil })
	return g.Wait()
}

// retention prunes the rows every pipeline is done with, older than cfg.Retention, hourly, in
// cfg.Schema (resolved).
func retention(cfg Config) outbox.Retention {
	log := cfg.Logger
	return outbox.Retention{
		PruneOptions: outbox.PruneOptions{OlderThan: cfg.Retention, Pause: 10 * time.Millisecond, Schema: cfg.Schema},
		OnPrune: func(res outbox.PruneResult, err error) {
			if err != nil {
				log.Warn().Err(err).Int64("deleted", res.Deleted).Msg("retention prune failed")
				return
			}
			if res.Deleted > 0 {
				log.Info().Int64("deleted", res.Deleted).Int("batches", res.Batches).Time("cutoff", res.Cutoff).
					Msg("pruned outbox rows every pipeline is done with")
			}
			if res.Kept > 0 {
				log.Warn().Int64("kept", res.Kept).Str("slot", res.Behind).Time("cutoff", res.Cutoff).
					Msg("retention kept older rows this slot has not confirmed: its pipeline is behind or stopped; " +
						"catch it up, or `outbox-relay drop-pipeline NAME` if it is gone")
			}
		},
	}
}

// gauges refreshes the in-process gauges once a second.
func (r *pipelineRunner) gauges(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if st := r.stream.State(); st.Streaming || st.StandingBy {
			r.m.PipelineUp.Set(1)
		} else {
			r.m.PipelineUp.Set(0)
		}
		events, bytes := r.tracker.Buffered()
		r.m.BufferedEvents.Set(float64(events))
		r.m.BufferedBytes.Set(float64(bytes))
		if oldest := r.tracker.OldestCommit(); !oldest.IsZero() {
			r.m.OldestUndelivered.Set(time.Since(oldest).Seconds())
		} else {
			r.m.OldestUndelivered.Set(0)
		}
	}
}

// stalled reports whether the pipeline streams here and is stalled: an event has waited longer
// than StallTimeout and nothing was delivered meanwhile.
func (r *pipelineRunner) stalled() (bool, string) {
	if paused, _ := r.pub.Paused(); paused {
		// Paused on purpose is not a fault: nothing is delivered, and that is not a stall.
		return false, ""
	}
	if f, ok := r.pub.(*publisher.Publisher); ok && f.HeldByEndpoints() {
		// only paused or failing endpoints hold events: on purpose, or the endpoints' own
		// trouble, which their series report; readiness is about the relay
		return false, ""
	}
	oldest := r.tracker.OldestCommit()
	if !oldest.IsZero() && time.Since(oldest) > r.cfg.StallTimeout {
		since := time.Since(time.Unix(0, r.lastAck.Load()))
		if since > r.cfg.StallTimeout {
			return true, fmt.Sprintf("stalled: events waiting and nothing delivered for %s", since.Round(time.Second))
		}
	}
	return false, ""
}

// listen opens the metrics address, so that a port in use fails the start; serve serves it.
func (r *runner) listen() (*http.Server, net.Listener, error) {
	if r.cfg.MetricsAddr == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", r.cfg.MetricsAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics address %q: %w", r.cfg.MetricsAddr, err)
	}
	srv := &http.Server{Handler: r.handler(), ReadHeaderTimeout: 5 * time.Second}
	r.cfg.metricsBound = ln.Addr().String() // the endpoints' URL guard refuses this (":0" picks a port)
	r.cfg.Logger.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	if r.cfg.Ready != nil {
		r.cfg.Ready(ln.Addr().String())
	}
	return srv, ln, nil
}

// handler serves /metrics, /healthz and /readyz (see Relay.Handler).
func (r *runner) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := r.ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// serve serves ln until shutdownHTTP; any other end is an error that stops the relay.
func (r *runner) serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}

// shutdownHTTP lets requests under way finish for up to 2s, then closes what is left.
func (r *runner) shutdownHTTP(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
}
