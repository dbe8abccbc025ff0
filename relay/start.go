package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/diagnose"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Each pipeline starts on its own: its destination, then its publication and slot (Setup),
// then its stream. A start that fails for a reason a retry can fix (the database not reachable
// yet, a server limit such as max_replication_slots, a broker not reachable) is retried with
// backoff for that pipeline alone, reported in the log, on /readyz and in
// outbox_relay_pipeline_up, while the other pipelines stream. An error only the operator can
// fix (permanent) still stops the relay, naming the pipeline and the fix.

// pipelineStart is one pipeline from the moment Run takes it to its end: what it is doing
// before it runs (for /readyz), and, once it runs, its components.
type pipelineStart struct {
	p   Pipeline
	log zerolog.Logger
	up  prometheus.Gauge // outbox_relay_pipeline_up

	mu     sync.Mutex
	phase  string          // what the start is doing now, e.g. "creating its slot"
	err    error           // the last failed attempt, while it is retried
	runner *pipelineRunner // set once it runs
	quiet  retry.Quiet     // a retry that fails the same way is logged once a minute
}

func newPipelineStart(cfg Config, p Pipeline) *pipelineStart {
	m := metrics.New(prometheus.WrapRegistererWith(p.labels(), cfg.Registerer))
	m.PipelineUp.Set(0)
	return &pipelineStart{p: p, log: cfg.pipelineLogger(p), up: m.PipelineUp,
		phase: "resolving the schema of the relay's tables, checking the row filters and shard counts of every pipeline"}
}

func (s *pipelineStart) setPhase(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase, s.err = phase, nil
}

// failing records a failed attempt of a start-up step, for /readyz, without logging it.
func (s *pipelineStart) failing(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// failed records a failed attempt that is retried in wait, and logs it: at once when it differs
// from the last one logged, else once a minute; a failed connection whose diagnosis names a
// fix, at every attempt.
func (s *pipelineStart) failed(err error, wait time.Duration) {
	s.failing(err)
	if p, ok := diagnose.Connect(err); ok && p.Fix != "" {
		logRetry(s.log, err, wait)
		return
	}
	if !s.quiet.Log(err) {
		return
	}
	if errors.Is(err, cdc.ErrServerLimit) {
		s.log.Error().Err(err).Dur("retry_in", wait).Msg("pipeline cannot start; the other pipelines run on")
		return
	}
	ev := s.log.Warn().Err(err).Dur("retry_in", wait)
	if errors.Is(err, cdc.ErrSlotUnreachable) {
		ev = ev.Str("fix", "make that server reachable; or give --replication-dsn for it to keep decoding there; "+
			"if it is gone for good, run once with --recreate-slot")
	}
	ev.Msg("database not ready; retrying")
}

// started records that the pipeline runs; its stream reports from now on.
func (s *pipelineStart) started(r *pipelineRunner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runner, s.err = r, nil
	if s.quiet.Logged() {
		s.log.Info().Msg("pipeline started after its start-up was retried")
	}
}

// running returns the pipeline's components once it runs, else nil.
func (s *pipelineStart) running() *pipelineRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runner
}

// pipelineState is one pipeline as /readyz and outbox_relay_pipeline_up see it.
type pipelineState struct {
	streaming, standby bool
	why                string // when neither: what it waits for, or why it cannot start
}

// state says what the pipeline is doing now.
func (s *pipelineStart) state() pipelineState {
	if r := s.running(); r != nil {
		st := r.stream.State()
		switch {
		case st.Streaming:
			return pipelineState{streaming: true}
		case st.StandingBy:
			return pipelineState{standby: true}
		case st.Err != nil && errors.Is(st.Err, cdc.ErrServerLimit):
			return pipelineState{why: "cannot stream: " + st.Err.Error()}
		case st.Err != nil:
			return pipelineState{why: "reconnecting: " + st.Err.Error()}
		}
		return pipelineState{why: "connecting to its slot"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return pipelineState{why: "cannot start (retrying): " + s.err.Error() + " (while " + s.phase + ")"}
	}
	return pipelineState{why: "starting: " + s.phase}
}

// start builds what the pipeline needs before it runs: its destination, then its publication
// and slot. It returns once they exist, with a permanent error, or when ctx ends.
func (s *pipelineStart) start(ctx context.Context, cfg Config, pool *pgxpool.Pool) (*pipelineRunner, error) {
	p := s.p
	s.setPhase("connecting to its destination")
	dest, closeDest, err := newDestination(ctx, cfg, p)
	if err != nil {
		return nil, err
	}
	s.setPhase("checking the database, creating its publication and slot")
	setup, err := setupWithRetry(ctx, cfg, p, s)
	if err != nil {
		closeDest()
		return nil, err
	}
	logSetup(s.log, cfg, p, setup)
	p.move = setup.Move
	r := newPipelineRunner(cfg, p, p.ownsStatus, cfg.Registerer, dest, pool)
	r.closeDest = closeDest
	return r, nil
}

// run starts the pipeline and runs it until ctx ends or it fails for good.
func (s *pipelineStart) run(ctx context.Context, cfg Config, pool *pgxpool.Pool) error {
	r, err := s.start(ctx, cfg, pool)
	if err != nil {
		return err
	}
	defer r.closeDest()
	s.started(r)
	return r.run(ctx)
}

// setupWithRetry runs cdc.Setup until it succeeds, fails for good (a misconfiguration whose
// error names the fix), or ctx ends. Anything else (a database that is restarting or not
// reachable, a server limit such as max_replication_slots) is retried with backoff, and each
// failed attempt reported to s.
func setupWithRetry(ctx context.Context, cfg Config, p Pipeline, s *pipelineStart) (cdc.SetupResult, error) {
	var res cdc.SetupResult
	gate := newConfigGate(cfg)
	err := retry.Do(ctx, startBackoff, func(ctx context.Context) error {
		var err error
		res, err = cdc.Setup(ctx, cfg.DSN, p.Slot, p.Publication,
			cdc.SetupOptions{Schema: cfg.Schema, NoBackfill: !p.Backfill, RecreateSlot: cfg.RecreateSlot, Filter: p.Filter,
				Failover: cfg.Failover, ReplicationDSN: cfg.ReplicationDSN, Logger: cfg.pipelineLogger(p),
				Endpoints: p.Endpoints, Pipeline: p.Name})
		return gate.check(err)
	}, s.failed)
	return res, err
}

// configGate classifies the failed attempts of one retried start-up step. A failed connection
// is replaced by its diagnosis (diagnose.Connect), so that the log, /readyz and the error Run
// returns name the cause and the fix instead of every attempt pgconn made; it is retried,
// unless ExitOnConfigError and it is a configuration error (a refused connection once it has
// persisted), which ends the step. Any other error is permanent or retried as
// stopIfPermanent says.
type configGate struct {
	exit  bool
	watch diagnose.Watch
}

func newConfigGate(cfg Config) *configGate { return &configGate{exit: cfg.ExitOnConfigError} }

func (g *configGate) check(err error) error {
	if err == nil {
		return nil
	}
	config := g.watch.Config(err)
	p, ok := diagnose.Connect(err)
	switch {
	case !ok || permanent(err) || p.Kind == diagnose.Outage:
		return stopIfPermanent(err) // an outage keeps its own words (a server limit names the setting)
	case config && g.exit:
		return retry.Stop(p)
	}
	return p
}

// logRetry logs a failed start-up attempt that is retried in wait: a failed connection with its
// cause and fix (an error when it is a configuration error, a warning while it may be an
// outage), anything else as the database not being ready.
func logRetry(log zerolog.Logger, err error, wait time.Duration) {
	p, ok := diagnose.Connect(err)
	if !ok || p.Fix == "" {
		log.Warn().Err(err).Dur("retry_in", wait).Msg("database not ready; retrying")
		return
	}
	ev := log.Warn()
	if p.Config() {
		ev = log.Error()
	}
	ev.Str("cause", p.Cause).Str("fix", p.Fix).Str("database", p.Addr).Dur("retry_in", wait).
		Msg("cannot connect to the database; retrying")
}

// startBackoff is the wait between the retries of a start-up step.
var startBackoff = retry.Backoff{First: 200 * time.Millisecond, Max: 10 * time.Second}

// stopIfPermanent marks a permanent error (one only the operator can fix) for retry.Do to stop
// on; any other is retried.
func stopIfPermanent(err error) error {
	if permanent(err) {
		return retry.Stop(err)
	}
	return err
}

// notReady is the retry report of the start-up steps before the pipelines start: it logs the
// failure (logRetry) and, for /readyz, records it as each pipeline's.
func notReady(log zerolog.Logger, starts ...*pipelineStart) func(error, time.Duration) {
	return func(err error, wait time.Duration) {
		for _, s := range starts {
			s.failing(err)
		}
		logRetry(log, err, wait)
	}
}

// ready reports whether every pipeline streams or stands by for another instance, and none
// that streams is stalled. The reason names the pipelines that are not; with one pipeline it
// reads as before pipelines. A shard this process was told to run (--shard, or shard: in the
// file) that another process streams counts as served: a shard pod that came back while a
// standby pod holds its slot is a ready standby (not ready, it would hold every rollout), and
// takes the slot over once that process lets go.
func (r *runner) ready() (bool, string) {
	var stalled, streaming, standby, held, waiting []string
	for _, s := range r.starts {
		st := s.state()
		name := s.p.Name
		switch {
		case st.streaming:
			streaming = append(streaming, name)
			if bad, why := s.running().stalled(); bad {
				stalled = append(stalled, name+": "+why)
			}
		case st.standby && s.p.shard.pinned:
			held = append(held, name)
		case st.standby:
			standby = append(standby, name)
		default:
			waiting = append(waiting, name+": "+st.why)
		}
	}
	if len(r.starts) == 1 && len(held) == 1 {
		return true, "standing by: another relay streams this shard; taking it over when that relay goes"
	}
	if len(r.starts) == 1 {
		return r.readySingle(stalled, standby, waiting)
	}

	if len(r.starts) > 1 && (len(stalled) > 0 || len(waiting) > 0) {
		// The pipelines that are fine, after the ones that are not.
		if len(streaming) > 0 {
			waiting = append(waiting, "streaming "+strings.Join(streaming, ", "))
		}
		if len(standby) > 0 {
			waiting = append(waiting, "standing by for "+strings.Join(standby, ", "))
		}
	}
	switch {
	case len(stalled) > 0:
		return false, "stalled pipelines: " + strings.Join(append(stalled, waiting...), "; ")
	case len(waiting) > 0:
		return false, "not ready: " + strings.Join(waiting, "; ")
	case len(streaming) == 0 && len(held) == 0:
		return false, "not streaming any pipeline (standing by): " + strings.Join(standby, ", ")
	}
	msg := "ok: streaming " + strings.Join(streaming, ", ")
	if len(streaming) == 0 {
		msg = "ok: streaming none here"
	}
	if len(held) > 0 {
		msg += "; standing by for " + strings.Join(held, ", ") + " while another relay streams them"
	}
	if len(standby) > 0 {
		msg += "; standing by for " + strings.Join(standby, ", ")
	}
	return true, msg
}

// readySingle is ready for the one pipeline of the flag path (or a one-pipeline file).
func (r *runner) readySingle(stalled, standby, waiting []string) (bool, string) {
	name := r.starts[0].p.Name + ": "
	switch {
	case len(stalled) > 0:
		return false, stalled[0][len(name):]
	case len(standby) > 0:
		return false, "not streaming: standing by (another instance streams from the slot)"
	case len(waiting) > 0:
		return false, "not streaming: " + waiting[0][len(name):]
	}
	if paused, why := r.starts[0].running().pub.Paused(); paused {
		return true, "paused: " + why
	}
	return true, "ok"
}
