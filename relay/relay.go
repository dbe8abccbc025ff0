// Package relay runs a relay from a Config: cdc.Stream reads committed outbox rows from the
// slot, the publisher delivers them, and their acknowledgements flow back to the stream's
// Tracker, which decides what the slot may confirm. It also serves /metrics, /healthz and
// /readyz. Run owns every goroutine it starts and waits for all of them before it returns.
package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Config is everything `outbox-relay run` takes.
type Config struct {
	DSN            string
	WebhookURL     string
	Secrets        []string
	Scheme         signature.Scheme
	Slot           string
	Publication    string
	MetricsAddr    string // empty: no HTTP server
	RetryMin       time.Duration
	RetryMax       time.Duration
	RequestTimeout time.Duration
	MaxInFlight    int
	// MaxAttempts dead-letters an event after this many attempts: 0 means about a day of
	// retries at RetryMax, a negative value retries forever.
	MaxAttempts       int
	MaxBufferedEvents int
	MaxBufferedBytes  int
	ShutdownTimeout   time.Duration
	StallTimeout      time.Duration
	StatusInterval    time.Duration // 0: derived from wal_sender_timeout
	// ReplicationTimeout declares the replication connection dead after this long with nothing
	// from the server, probes included (see cdc.Config.ReplicationTimeout); it is also the
	// TCP_USER_TIMEOUT of every connection the relay opens. If zero, the server's
	// wal_sender_timeout, or 60s when that is 0.
	ReplicationTimeout time.Duration
	// Retention, if positive, deletes delivered rows older than this in the background.
	Retention time.Duration
	// NoBackfill turns off the backfill. If false (the default), whenever the relay creates the
	// slot it records the rows still pending, which the new slot cannot carry, and delivers them
	// first.
	NoBackfill bool
	// RecreateSlot drops a slot no process streams from (an invalidated one always) and creates
	// it again, with a backfill. If false, an invalidated slot is an error naming this option.
	RecreateSlot bool
	// LogPayloads logs the payload of failed attempts.
	LogPayloads bool
	// PollInterval is how often the database-only gauges are refreshed. If zero, 15s.
	PollInterval time.Duration
	Version      string
	Commit       string
	Logger       zerolog.Logger
	// Registry receives every series, the Go and process collectors included, and is what
	// /metrics serves; if nil, a new one is used. Give each Run its own.
	Registry *prometheus.Registry
	// Ready, if set, is called with the metrics server's address once it listens.
	Ready func(metricsAddr string)

	// Failover is --failover: the zero value cdc.FailoverAuto makes the slot a failover slot on
	// PostgreSQL 17+ (README: Failover slots).
	Failover cdc.FailoverMode
	// ReplicationDSN is --replication-dsn: if set, the slot lives on and is decoded by that
	// server (a hot standby, PostgreSQL 16+), while setup checks, marks, replays and status use
	// DSN. Empty: everything uses DSN.
	ReplicationDSN string

	// Control is the pipeline's pause, resume and 410 Gone settings (see ControlConfig).
	Control ControlConfig
}

// Defaults for Config fields left zero.
const (
	DefaultSlot              = "outbox_relay"
	DefaultPublication       = "outbox_relay"
	DefaultMaxInFlight       = 64
	DefaultMaxBufferedEvents = 8192
	DefaultMaxBufferedBytes  = 32 << 20
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultStallTimeout      = 3 * time.Minute
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
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = AttemptsForADay(c.RetryMin, c.RetryMax)
	}
	c.Control.defaults()
}

// AttemptsForADay is the number of attempts whose backoff delays add up to about 24 hours.
func AttemptsForADay(lo, hi time.Duration) int {
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 10 * time.Minute
	}
	total, n := time.Duration(0), 1
	for d := lo; total < 24*time.Hour; n++ {
		total += min(d, hi)
		d = min(d*2, hi)
	}
	return n
}

// Run runs the relay until ctx is done (then drains and returns nil) or a permanent error.
// Every goroutine it starts has ended when it returns.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	log := cfg.Logger
	hook, err := publisher.NewWebhook(publisher.WebhookConfig{URL: cfg.WebhookURL, Secrets: cfg.Secrets,
		Scheme: cfg.Scheme, Timeout: cfg.RequestTimeout, MaxConns: cfg.MaxInFlight, UserAgent: "outbox-relay/" + cfg.Version})
	if err != nil {
		return err
	}
	defer hook.Close()
	registerProcess(cfg.Registry, cfg.Version, cfg.Commit)

	if _, err := pgconn.ParseConfig(cfg.DSN); err != nil {
		return fmt.Errorf("bad DSN (set DB_DSN or --dsn to a postgres:// URL): %w", err)
	}
	setup, err := setupWithRetry(ctx, cfg)
	if stoppedDuringStartup(ctx, err) {
		log.Info().Msg("stopped during start-up")
		return nil
	}
	if err != nil {
		return err
	}
	logSetup(log, cfg, setup)
	pool, err := newPool(ctx, cfg)
	if stoppedDuringStartup(ctx, err) {
		log.Info().Msg("stopped during start-up")
		return nil
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	r := newRunner(cfg, cfg.Registry, hook, pool)
	err = r.run(ctx)
	if stoppedDuringStartup(ctx, err) {
		// A start-up lookup of a component (parked aggregates, the backfill) was cut short by the
		// stop: nothing was lost, and the next start redoes it.
		log.Info().Err(err).Msg("stopped during start-up")
		return nil
	}
	return err
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

// setupWithRetry runs cdc.Setup until it succeeds, fails for good (a misconfiguration whose
// error names the fix), or ctx ends. A database that is restarting or unreachable is retried
// with backoff: the relay waits for it rather than exiting.
func setupWithRetry(ctx context.Context, cfg Config) (cdc.SetupResult, error) {
	wait := 200 * time.Millisecond
	for {
		res, err := cdc.Setup(ctx, cfg.DSN, cfg.Slot, cfg.Publication,
			cdc.SetupOptions{NoBackfill: cfg.NoBackfill, RecreateSlot: cfg.RecreateSlot,
				Failover: cfg.Failover, ReplicationDSN: cfg.ReplicationDSN, Logger: cfg.Logger})
		if ctx.Err() != nil {
			// Stopped while waiting: not a failure, whatever the interrupted attempt returned.
			return res, ctx.Err()
		}
		if err == nil || permanent(err) {
			return res, err
		}
		cfg.Logger.Warn().Err(err).Dur("retry_in", wait).Msg("database not ready; retrying")
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// permanent reports whether a setup error needs the operator: a retry cannot fix it.
func permanent(err error) bool {
	for _, target := range []error{cdc.ErrWalLevel, cdc.ErrNoOutboxTable, cdc.ErrNoReplication, cdc.ErrSlotInvalid,
		cdc.ErrSlotMismatch, cdc.ErrNoPrivilege, cdc.ErrSchema, cdc.ErrPublicationMissing,
		cdc.ErrFailoverUnsupported, cdc.ErrStandbyUnsupported} {
		if errors.Is(err, target) {
			return true
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Authentication (28), unknown database (3D000) and privilege (42501) need the operator.
		return strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000" || pgErr.Code == "42501"
	}
	return false
}

func logSetup(log zerolog.Logger, cfg Config, s cdc.SetupResult) {
	if s.PublicationCreated {
		log.Info().Str("publication", cfg.Publication).Msg("publication created")
	}
	if s.SlotRecreated {
		log.Warn().Str("slot", cfg.Slot).Str("reason", s.SlotRecreatedWhy).Int("backfill", s.Backfill).
			Msg("SLOT DROPPED AND RECREATED; pending rows are backfilled, and events delivered but not yet marked done may arrive again")
	}
	if s.SlotCreated {
		log.Info().Str("slot", cfg.Slot).Int("backfill", s.Backfill).Bool("no_backfill", cfg.NoBackfill).
			Msg("replication slot created")
	}
	if s.Backfill > 0 && !s.CommitOrder {
		log.Warn().Int("backfill", s.Backfill).Msg("backfill delivers in insertion order; across overlapping transactions " +
			"that is not always commit order: commit order needs track_commit_timestamp = on")
	}
	if f := s.Failover; f.Supported {
		log.Info().Str("slot", cfg.Slot).Bool("failover", f.On).Bool("changed", f.Changed).Bool("pending", f.Pending).
			Msg("failover slot setting")
	}
	if cfg.ReplicationDSN != "" {
		log.Info().Str("slot", cfg.Slot).Msg("decoding on the --replication-dsn server; marks and replays use the primary")
	}
	log.Info().Str("slot", cfg.Slot).Str("publication", cfg.Publication).Int("max_in_flight", cfg.MaxInFlight).
		Int("max_buffered_events", cfg.MaxBufferedEvents).Int("max_buffered_bytes", cfg.MaxBufferedBytes).
		Int("max_attempts", cfg.MaxAttempts).
		Str("signature_scheme", cfg.Scheme.String()).Msg("relay starting")
}

// runner holds the wired components of one run.
type runner struct {
	cfg     Config
	pool    *pgxpool.Pool
	m       *metrics.Metrics // the relay's own gauges: the tracker's, and the poller's
	tracker *cdc.Tracker
	stream  *cdc.Stream
	pub     *publisher.Publisher
	marker  *publisher.Marker
	poller  *inspect.Poller
	lastAck atomic.Int64 // unix nanos of the last delivery
}

// newRunner builds the components of one run, each registering its series on reg. It connects
// nowhere: dest and pool are used once run starts.
func newRunner(cfg Config, reg prometheus.Registerer, dest publisher.Destination, pool *pgxpool.Pool) *runner {
	r := &runner{cfg: cfg, pool: pool, m: metrics.New(reg),
		tracker: cdc.NewTracker(cfg.MaxBufferedEvents, cfg.MaxBufferedBytes)}
	r.lastAck.Store(time.Now().UnixNano())
	streamDSN := cfg.DSN
	if cfg.ReplicationDSN != "" {
		streamDSN = cfg.ReplicationDSN
	}
	r.stream = cdc.NewStream(cdc.Config{DSN: streamDSN, Slot: cfg.Slot, Publication: cfg.Publication,
		StatusInterval: cfg.StatusInterval, ReplicationTimeout: cfg.ReplicationTimeout,
		Dial: dialer(userTimeout(cfg)), Logger: cfg.Logger, Registerer: reg, AllowStandby: cfg.ReplicationDSN != ""}, r.tracker)
	r.marker = publisher.NewMarker(pool, publisher.MarkerConfig{Logger: cfg.Logger, Registerer: reg})
	r.poller = inspect.NewPoller(pool, cfg.Slot, r.m, cfg.PollInterval, cfg.Logger)
	r.pub = publisher.New(publisher.Config{MaxInFlight: cfg.MaxInFlight, RetryMin: cfg.RetryMin,
		RetryMax: cfg.RetryMax, ShutdownTimeout: cfg.ShutdownTimeout, Logger: cfg.Logger, Registerer: reg,
		MaxAttempts: max(cfg.MaxAttempts, 0), Store: publisher.PGStore{Pool: pool}, LogPayloads: cfg.LogPayloads,
		BackfillSlot: cfg.Slot,
		Resume:       &publisher.Resume{Delivered: r.marker.Delivered},
		Pipeline:     cfg.Control.Pipeline, OnGone: cfg.Control.OnGone, RecordPause: r.recordPause}, dest, r, r.marker)
	// Nothing is sent before the control row says whether the pipeline is paused.
	r.pub.Pause("starting: reading the pipeline's control row")
	return r
}

// Ack passes a settled event to the tracker and notes the time, for the stall check.
func (r *runner) Ack(ev *cdc.Event) {
	r.tracker.Ack(ev)
	r.lastAck.Store(time.Now().UnixNano())
}

// Grow passes a replay's events to the tracker.
func (r *runner) Grow(tx *cdc.Tx, evs []*cdc.Event) { r.tracker.Grow(tx, evs) }

// run starts every component under one errgroup and waits for all of them. The stop goes in
// order: the stream and the publisher stop taking (streamCtx), the publisher drains and closes
// drained, after which the stream confirms its final position; then the marker flushes what
// the drain delivered, and /metrics answers until the marker is done.
func (r *runner) run(ctx context.Context) error {
	srv, ln, err := r.listen()
	if err != nil {
		return err
	}
	txs := make(chan *cdc.Tx, 64)
	drained := make(chan struct{})
	// streamCtx ends on shutdown, or early when the stream or the HTTP server fails for good.
	streamCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	// markerCtx outlives streamCtx: it ends once the stream and the publisher have returned.
	markerCtx, stopMarker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMarker()
	var g errgroup.Group
	var path sync.WaitGroup // the stream and the publisher
	path.Add(2)
	g.Go(func() error {
		defer path.Done()
		err := r.stream.Run(streamCtx, txs, drained)
		stopAll()
		return err
	})
	g.Go(func() error {
		defer path.Done()
		defer close(drained)
		r.pub.Run(streamCtx, txs)
		return nil
	})
	markerDone := make(chan struct{})
	g.Go(func() error {
		defer close(markerDone)
		return r.marker.Run(markerCtx)
	})
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
	g.Go(func() error { r.control(streamCtx); return nil })
	if r.cfg.Retention > 0 {
		g.Go(func() error { return r.retention().Run(streamCtx, r.pool) })
	}
	if srv != nil {
		g.Go(func() error {
			err := r.serve(srv, ln)
			if err != nil {
				stopAll()
			}
			return err
		})
		g.Go(func() error {
			<-markerDone
			r.shutdownHTTP(srv)
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		r.cfg.Logger.Info().Float64("delivered", gathered(r.cfg.Registry, "outbox_relay_events_delivered_total")).
			Float64("received", gathered(r.cfg.Registry, "outbox_relay_events_received_total")).Msg("relay stopped")
	}
	return err
}

// retention prunes delivered rows older than Retention, hourly.
func (r *runner) retention() outbox.Retention {
	log := r.cfg.Logger
	return outbox.Retention{
		PruneOptions: outbox.PruneOptions{OlderThan: r.cfg.Retention, Pause: 10 * time.Millisecond},
		OnPrune: func(res outbox.PruneResult, err error) {
			if err != nil {
				log.Warn().Err(err).Int64("deleted", res.Deleted).Msg("retention prune failed")
				return
			}
			if res.Deleted > 0 {
				log.Info().Int64("deleted", res.Deleted).Int("batches", res.Batches).Time("cutoff", res.Cutoff).
					Msg("pruned delivered outbox rows")
			}
		},
	}
}

// gauges refreshes the in-process gauges once a second.
func (r *runner) gauges(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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

// ready reports whether the relay is streaming and not stalled.
func (r *runner) ready() (bool, string) {
	if !r.stream.Streaming() {
		return false, "not streaming (standing by, or reconnecting)"
	}
	if paused, why := r.pub.Paused(); paused {
		// Paused on purpose is not a fault: nothing is delivered, and that is not a stall.
		return true, "paused: " + why
	}
	// Stalled: an event has waited longer than StallTimeout and nothing was delivered meanwhile.
	oldest := r.tracker.OldestCommit()
	if !oldest.IsZero() && time.Since(oldest) > r.cfg.StallTimeout {
		since := time.Since(time.Unix(0, r.lastAck.Load()))
		if since > r.cfg.StallTimeout {
			return false, fmt.Sprintf("stalled: events waiting and nothing delivered for %s", since.Round(time.Second))
		}
	}
	return true, "ok"
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
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := r.ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.cfg.Logger.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	if r.cfg.Ready != nil {
		r.cfg.Ready(ln.Addr().String())
	}
	return srv, ln, nil
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
