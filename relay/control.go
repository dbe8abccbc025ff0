package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// ControlConfig is the pipelines' control: each pipeline's row in outbox_pipeline_control (by
// its name; the shards of a sharded pipeline share its row, as they share its destination), which `outbox-relay pause` and `resume` write, is read every PollInterval.
type ControlConfig struct {
	// OnGone is what a 410 Gone answer does in the default pipeline (Pipeline.OnGone in each
	// pipeline of a config file): the zero value publisher.GonePause pauses the pipeline
	// (durably) and leaves the event undelivered; publisher.GoneRetry retries it like any
	// failed attempt.
	OnGone publisher.GoneAction
	// PollInterval is how often the leader reads the control row. If zero, 1s.
	PollInterval time.Duration
}

func (c *ControlConfig) defaults() {
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
}

// control reads the pipeline's control row every PollInterval until ctx ends, and pauses or
// resumes the publisher when the row changes (its version grows). The publisher starts paused,
// so nothing is sent before the first read; a process that stands by reads too, so it takes
// over in the state the row says. Only changes are applied: a pause the publisher decided
// itself (410 Gone) is not undone by a read taken before it was recorded. It also reads the
// family's reshard row (see Reshard): a new shard stays paused until the fence is reached, and
// an old shard whose slot confirmed the fence retires: retire stops its stream.
func (r *pipelineRunner) control(ctx context.Context, retire func()) {
	t := time.NewTicker(r.cfg.Control.PollInterval)
	defer t.Stop()
	seen := int64(-1)
	var failing, gated, fenceRead, fenceFailing bool
	var gateWhy string
	pubOID := r.pubOID // the publication's identity; 0: not known yet
	for {
		pubOID = r.watchPublication(ctx, pubOID)
		c, err := r.readControl(ctx)
		fs, ferr := r.fence(ctx)
		switch {
		case ferr != nil && ctx.Err() == nil:
			// Keep the last state, and before any read the closed one: a gate opens only when a
			// read says so.
			if !fenceFailing {
				r.log.Warn().Err(ferr).Msg("cannot read the pipeline's reshard row; keeping the current state")
			}
			fenceFailing = true
			fs = fenceState{gated: gated || !fenceRead, why: "cannot read the reshard row yet"}
		case ferr == nil:
			fenceRead, fenceFailing = true, false
		}
		if fs.retire {
			r.log.Info().Str("slot", r.p.Slot).Msg("reshard: this old shard delivered everything up to the fence; " +
				"it stops streaming (its slot is dropped by `outbox-relay reshard`; remove it from the config)")
			retire()
			return
		}
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				r.log.Warn().Err(err).Msg("cannot read the pipeline's control row; keeping the current pause state")
			}
			failing = true
		case err == nil:
			failing = false
			if c.Version != seen || fs.gated != gated || fs.gated && fs.why != gateWhy {
				r.applyGated(c, fs, seen < 0, gated, fs.why != gateWhy)
				seen, gated, gateWhy = c.Version, fs.gated, fs.why
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// applyGated applies the control row unless the reshard gate holds the pipeline; a new reason
// to hold it is logged.
func (r *pipelineRunner) applyGated(c control.Pause, fs fenceState, first, wasGated, newWhy bool) {
	switch {
	case fs.gated && !c.Paused:
		r.pub.Pause(fs.why)
		switch {
		case wasGated && !newWhy:
		case fs.lost:
			r.log.Error().Msg(fs.why)
		default:
			r.log.Info().Msg(fs.why)
		}
	case wasGated && !c.Paused:
		r.pub.Resume()
		r.log.Info().Msg("reshard: the old shards reached the fence; this new shard delivers")
	default:
		r.apply(c, first)
	}
}

func (r *pipelineRunner) readControl(ctx context.Context) (control.Pause, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return control.ReadPause(ctx, r.pool, r.cfg.Schema, r.p.family())
}

// apply makes the publisher follow the control row, logging transitions (first: the start).
func (r *pipelineRunner) apply(c control.Pause, first bool) {
	log := r.log
	if c.Paused {
		r.pub.Pause(c.Reason)
		log.Warn().Str("pipeline", c.Pipeline).Str("reason", c.Reason).Time("paused_at", deref(c.PausedAt)).
			Msg("pipeline paused: nothing is sent until `outbox-relay resume`")
		return
	}
	r.pub.Resume()
	if !first {
		log.Info().Str("pipeline", c.Pipeline).Msg("pipeline resumed")
	}
}

// recordPause writes a pause the publisher decided (410 Gone) to the control row.
func (r *pipelineRunner) recordPause(ctx context.Context, reason string) error {
	_, err := control.SetPaused(ctx, r.pool, r.cfg.Schema, r.p.family(), true, reason)
	return err
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// watchPublication compares the pipeline's publication with the one seen before in this process
// (oid, 0 for none yet) while it streams, and tells the stream when it was dropped or replaced:
// PostgreSQL 18 streams on without rows instead of failing (cdc.Stream.PublicationLost). It
// returns the oid to compare with next time.
func (r *pipelineRunner) watchPublication(ctx context.Context, seen uint32) uint32 {
	if !r.stream.Streaming() {
		// Keep what was seen: a walsender that lost its publication may have dropped the
		// connection, and the publication may be back (replaced) by the time the stream is.
		return seen
	}
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var oid uint32
	err := r.pool.QueryRow(qctx, `SELECT oid FROM pg_publication WHERE pubname = $1`, r.p.Publication).Scan(&oid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		r.log.Error().Str("publication", r.p.Publication).Msg("publication dropped while streaming")
		r.stream.PublicationLost()
		return 0
	case err != nil:
		return seen // cannot tell now: look again at the next tick
	case seen != 0 && oid != seen:
		r.log.Error().Str("publication", r.p.Publication).Msg("publication dropped and created again while streaming")
		r.stream.PublicationLost()
		return 0
	}
	return oid
}

// publicationOID reads the pipeline's publication's oid, or 0 when it cannot be read.
func (r *pipelineRunner) publicationOID(ctx context.Context) uint32 {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var oid uint32
	_ = r.pool.QueryRow(qctx, `SELECT oid FROM pg_publication WHERE pubname = $1`, r.p.Publication).Scan(&oid)
	return oid
}
