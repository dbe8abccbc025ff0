package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/tracing"
)

// Relay is a relay ready to run: New has checked its Config. A program embeds it by calling
// Run in a goroutine it owns and mounting Handler on its own mux.
type Relay struct {
	cfg Config
	r   *runner
	ran atomic.Bool
}

// ErrConfig is wrapped by the errors of a Config that New refuses before anything starts.
var ErrConfig = errors.New("invalid relay config")

// New checks cfg (the pipelines, their destinations and delivery settings, the DSN) and
// registers every series on cfg.Registerer, connecting nowhere: a database or a broker not
// reachable yet is waited for by Run. An error names the setting and the fix.
func New(cfg Config) (*Relay, error) {
	if err := cfg.oneForm(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if cfg.Registerer == nil || cfg.Gatherer == nil {
		return nil, fmt.Errorf("%w: Registerer is not a prometheus.Gatherer: give the Gatherer that serves its series too", ErrConfig)
	}
	pipes, err := cfg.pipelines()
	if err != nil {
		return nil, err
	}
	for _, p := range pipes {
		if err := p.Delivery.Validate(); err != nil {
			return nil, cfg.named(p, err)
		}
		if err := checkDestination(p); err != nil {
			return nil, cfg.named(p, err)
		}
	}
	if _, err := pgconn.ParseConfig(cfg.DSN); err != nil {
		return nil, fmt.Errorf("%w: %w", cdc.ErrBadDSN, err)
	}
	if err := cfg.validateOperator(); err != nil {
		return nil, err
	}
	if err := cfg.validateEgress(); err != nil {
		return nil, err
	}
	cfg.operator = newOperatorHook(cfg)
	cfg.tracer = tracing.Tracer(cfg.TracerProvider, cfg.Version)
	registerProcess(cfg.Registerer, cfg.Version, cfg.Commit)
	r := &runner{cfg: cfg}
	for _, p := range pipes {
		r.starts = append(r.starts, newPipelineStart(cfg, p))
	}
	return &Relay{cfg: cfg, r: r}, nil
}

// Run runs the relay until ctx is done (then drains and returns nil) or a permanent error.
// Every goroutine it starts has ended when it returns. Handler (and MetricsAddr, if set) answer
// from the start. Each pipeline starts and runs independently: one whose start-up fails for a
// reason a retry can fix (see start.go) is retried on its own while the others stream; a
// permanent error in any of them (or in the metrics server) stops them all. A Relay runs once.
func (rl *Relay) Run(ctx context.Context) error {
	if !rl.ran.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice: a Relay runs once; make another with New")
	}
	cfg := rl.cfg
	pool, err := newPool(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	rl.r.pool = pool
	err = rl.r.run(ctx)
	if stoppedDuringStartup(ctx, err) {
		// A start-up step (the checks, a slot, a lookup of a component) was cut short by the
		// stop: nothing was lost, and the next start redoes it. A nil error was a stop the
		// runner already reported.
		if err != nil {
			cfg.Logger.Info().Err(err).Msg("stopped during start-up")
		}
		return nil
	}
	return err
}

// Handler serves /metrics (cfg.Gatherer), /healthz (the process answers) and /readyz (every
// pipeline streams or stands by, and none is stalled; 503 with the reason otherwise), for a
// program's own mux: mux.Handle("/", r.Handler()), or under a prefix with http.StripPrefix. It
// answers before Run and after it returns (not ready then).
func (rl *Relay) Handler() http.Handler { return rl.r.handler() }

// Run is New(cfg) then Run(ctx): the relay of `outbox-relay run`.
func Run(ctx context.Context, cfg Config) error {
	rl, err := New(cfg)
	if err != nil {
		return err
	}
	return rl.Run(ctx)
}

// oneForm refuses a Config that sets Pipelines and a default-pipeline field: that field would
// apply to no pipeline.
func (c *Config) oneForm() error {
	if len(c.Pipelines) == 0 {
		return nil
	}
	set := map[string]bool{"WebhookURL": c.WebhookURL != "", "Secrets": len(c.Secrets) > 0, "Scheme": c.Scheme != 0,
		"Slot": c.Slot != "", "Publication": c.Publication != "", "RetryMin": c.RetryMin != 0, "RetryMax": c.RetryMax != 0,
		"RequestTimeout": c.RequestTimeout != 0, "MaxInFlight": c.MaxInFlight != 0, "MaxAttempts": c.MaxAttempts != 0,
		"MaxBufferedEvents": c.MaxBufferedEvents != 0, "MaxBufferedBytes": c.MaxBufferedBytes != 0, "NoBackfill": c.NoBackfill,
		"Delivery": c.Delivery != Delivery{}, "Destination": c.Destination != nil, "Shards": c.Shards != 0,
		"Control.OnGone": c.Control.OnGone != 0, "Endpoints": c.Endpoints}
	for _, name := range defaultPipelineFields {
		if set[name] {
			return fmt.Errorf("%w: %s is a setting of the default pipeline, and Pipelines is set: "+
				"set it on each Pipeline instead, or leave Pipelines empty", ErrConfig, name)
		}
	}
	return nil
}

// defaultPipelineFields are the Config fields that describe the pipeline named "default", in
// the order of the Config's doc.
var defaultPipelineFields = []string{"WebhookURL", "Secrets", "Scheme", "Slot", "Publication", "RetryMin", "RetryMax",
	"RequestTimeout", "MaxInFlight", "MaxAttempts", "MaxBufferedEvents", "MaxBufferedBytes", "NoBackfill", "Delivery",
	"Destination", "Shards", "Control.OnGone", "Endpoints"}
