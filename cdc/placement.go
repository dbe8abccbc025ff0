package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// ErrMoveBroken is wrapped when the old slot of a move disappeared before it had confirmed the
// fence: what committed between its last confirmed position and the fence is in no slot. The
// message names the fix (recreating the slot, which backfills the rows still pending).
var ErrMoveBroken = errors.New("the old slot of a move was dropped before it reached the fence")

// ErrSlotUnreachable is wrapped when the slot lives on a server (recorded in
// outbox_slot_location) that cannot be reached, so it cannot be drained before decoding moves.
// It is retried: a standby that restarts comes back.
var ErrSlotUnreachable = errors.New("the slot lives on a server that cannot be reached")

// placement decides, in Setup, on which server the slot is decoded: target, the server the
// relay is configured for (the replication DSN's, else the primary), unless the slot still lives
// on another server of the cluster, which must first be drained up to a fence (Move).
type placement struct {
	primary    *pgx.Conn
	primaryDSN string
	target     server
	tconn      *pgx.Conn // the target's connection: primary itself when the target is the primary
	inRecovery bool      // the target is a standby
	slot       string
	schema     string // of the relay's tables on the primary (Setup resolved it), where the location rows are
	opts       SetupOptions
}

// newPlacement connects to the target and checks that it can decode.
func newPlacement(ctx context.Context, primary *pgx.Conn, dsn, slot, s string, opts SetupOptions) (*placement, error) {
	p := &placement{primary: primary, primaryDSN: dsn, target: primaryServer(dsn), tconn: primary, slot: slot, schema: s, opts: opts}
	if opts.ReplicationDSN == "" {
		return p, nil
	}
	var err error
	if p.target, err = standbyServer(opts.ReplicationDSN); err != nil {
		return nil, err
	}
	if p.tconn, err = pgx.Connect(ctx, opts.ReplicationDSN); err != nil {
		return nil, fmt.Errorf("connect to the replication DSN: %w", err)
	}
	if p.inRecovery, err = checkDecodingServer(ctx, p.tconn); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *placement) close() {
	if p.tconn != p.primary {
		_ = p.tconn.Close(context.Background())
	}
}

// place returns the move the stream must run before it decodes on the target, or nil when the
// slot lives on the target (or is to be created there).
func (p *placement) place(ctx context.Context) (*Move, error) {
	loc, err := state.ReadLocation(ctx, p.primary, p.schema, p.slot)
	if err != nil {
		return nil, err
	}
	if loc.Moving {
		if loc, err = p.settle(ctx, loc); err != nil {
			return nil, err
		}
	}
	if loc.Moving {
		return p.continueMove(ctx, loc)
	}
	return p.maybeMove(ctx, loc)
}

// settle finishes a move whose old slot reached the fence, and abandons one towards another
// server than the target (its new slot was never streamed: a move streams its old slot only, so
// dropping the new one loses nothing). It returns the location that holds afterwards.
func (p *placement) settle(ctx context.Context, loc state.Location) (state.Location, error) {
	from, to := recordedServer(p.primaryDSN, loc.Server), recordedServer(p.primaryDSN, loc.MoveTo)
	switch {
	case loc.Reached:
		if err := dropMovedSlot(ctx, from, p.slot, true, p.opts.Logger); err != nil {
			return loc, err
		}
		if err := state.FinishMove(ctx, p.primary, p.schema, p.slot); err != nil {
			return loc, err
		}
		p.opts.Logger.Info().Str("slot", p.slot).Str("from", from.String()).Str("to", to.String()).
			Msg("slot move finished: the old slot reached the fence and is dropped")
		return state.Location{Found: true, Server: loc.MoveTo}, nil
	case loc.MoveTo != p.target.name:
		if err := dropMovedSlot(ctx, to, p.slot, false, p.opts.Logger); err != nil {
			return loc, fmt.Errorf("abandon the move of slot %q to %s (the relay is now configured for %s): %w",
				p.slot, to, p.target, err)
		}
		if err := state.SetLocation(ctx, p.primary, p.schema, p.slot, loc.Server); err != nil {
			return loc, err
		}
		p.opts.Logger.Warn().Str("slot", p.slot).Str("abandoned_to", to.String()).Str("target", p.target.String()).
			Msg("slot move abandoned: the relay is configured for another server; the unused new slot is dropped")
		return state.Location{Found: true, Server: loc.Server}, nil
	}
	return loc, nil
}

// continueMove resumes a move under way towards the target.
func (p *placement) continueMove(ctx context.Context, loc state.Location) (*Move, error) {
	old := recordedServer(p.primaryDSN, loc.Server)
	oconn, err := old.connect(ctx)
	if err != nil {
		return nil, p.unreachable(old, err)
	}
	defer oconn.Close(context.Background())
	exists, err := slotExists(ctx, oconn, p.slot)
	switch {
	case err != nil:
		return nil, fmt.Errorf("look up slot %q on %s: %w", p.slot, old, err)
	case !exists && p.opts.RecreateSlot:
		return nil, state.SetLocation(ctx, p.primary, p.schema, p.slot, p.target.name) // the target's slot is recreated with a backfill
	case !exists:
		return nil, brokenMove(p.slot, old, recordedServer(p.primaryDSN, loc.MoveTo), loc.Fence)
	case p.opts.RecreateSlot:
		return nil, p.dropOld(ctx, oconn, old)
	}
	fence, created, err := p.newSlot(ctx)
	if err != nil {
		return nil, err
	}
	if !created {
		fence = loc.Fence
	} else if err := state.StartMove(ctx, p.primary, p.schema, p.slot, loc.Server, p.target.name, fence); err != nil {
		return nil, err // the new slot was dropped by hand: the move continues to its new start
	}
	return p.move(old, fence), nil
}

// maybeMove starts a move when the slot still lives on another server than the target.
func (p *placement) maybeMove(ctx context.Context, loc state.Location) (*Move, error) {
	if loc.Server == p.target.name {
		return nil, nil
	}
	old := recordedServer(p.primaryDSN, loc.Server)
	oconn, err := old.connect(ctx)
	if err != nil {
		if p.opts.RecreateSlot {
			p.opts.Logger.Warn().Err(err).Str("slot", p.slot).Str("old_server", old.String()).
				Msg("the slot's old server cannot be reached; recreating the slot here as asked (drop the old one there by hand: it holds WAL)")
			return nil, nil
		}
		return nil, p.unreachable(old, err)
	}
	defer oconn.Close(context.Background())
	if same, err := sameServer(ctx, oconn, p.tconn); err != nil || same {
		return nil, err // one server under two names: the slot is where it is
	}
	exists, err := slotExists(ctx, oconn, p.slot)
	if err != nil || !exists {
		return nil, err // nothing to drain: the target's slot is used, or created with a backfill
	}
	if err := lookupSlot(ctx, oconn, p.slot); err != nil {
		return nil, fmt.Errorf("slot %q on %s cannot be moved: %w", p.slot, old, err)
	}
	if p.opts.RecreateSlot {
		return nil, p.dropOld(ctx, oconn, old)
	}
	fence, _, err := p.newSlot(ctx)
	if err != nil {
		return nil, err
	}
	if err := state.StartMove(ctx, p.primary, p.schema, p.slot, loc.Server, p.target.name, fence); err != nil {
		return nil, err
	}
	p.opts.Logger.Info().Str("slot", p.slot).Str("from", old.String()).Str("to", p.target.String()).Str("fence", fence.String()).
		Msg("slot move started: the old slot delivers up to the fence, then the new slot takes over")
	return p.move(old, fence), nil
}

func (p *placement) move(old server, fence pglogrepl.LSN) *Move {
	return &Move{From: old.String(), To: p.target.String(), Fence: fence, slot: p.slot, primary: p.primaryDSN, schema: p.schema,
		old: old}
}

// dropOld drops the old slot for --recreate-slot: the target's slot is then created with a
// backfill.
func (p *placement) dropOld(ctx context.Context, oconn *pgx.Conn, old server) error {
	if _, err := dropForRecreate(ctx, oconn, p.slot); err != nil {
		return fmt.Errorf("on %s: %w", old, err)
	}
	p.opts.Logger.Warn().Str("slot", p.slot).Str("old_server", old.String()).Msg("old slot dropped to recreate the slot")
	return state.SetLocation(ctx, p.primary, p.schema, p.slot, p.target.name)
}

// newSlot creates the move's new slot on the target unless it exists, and returns its start
// (its confirmed position: nothing streams a move's new slot before the move is done).
func (p *placement) newSlot(ctx context.Context) (fence pglogrepl.LSN, created bool, err error) {
	if err := checkNotSynced(ctx, p.tconn, p.slot); err != nil {
		return 0, false, err
	}
	created, err = p.withNudge(ctx, func() (bool, error) { return ensureSlot(ctx, p.tconn, p.slot) })
	if err != nil {
		return 0, false, fmt.Errorf("create the new slot on %s: %w", p.target, err)
	}
	var pos string
	if err := p.tconn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		p.slot).Scan(&pos); err != nil {
		return 0, false, fmt.Errorf("read the new slot's start on %s: %w", p.target, err)
	}
	fence, err = pglogrepl.ParseLSN(pos)
	return fence, created, err
}

// withNudge runs create while asking the primary for the running-transactions record a slot on
// a standby waits for.
func (p *placement) withNudge(ctx context.Context, create func() (bool, error)) (bool, error) {
	if !p.inRecovery {
		return create()
	}
	nudgeCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nudgeStandbySnapshot(nudgeCtx, p.primary)
	}()
	created, err := create()
	stop()
	wg.Wait()
	return created, err
}

// recordTarget notes where the slot lives once Setup has it on the target: a slot on a standby
// always has a row, so that a relay without the replication DSN finds it.
func (p *placement) recordTarget(ctx context.Context) error {
	loc, err := state.ReadLocation(ctx, p.primary, p.schema, p.slot)
	if err != nil || loc.Server == p.target.name && (loc.Found || !p.target.isStandby()) {
		return err
	}
	return state.SetLocation(ctx, p.primary, p.schema, p.slot, p.target.name)
}

// unreachable is the error of an old server that cannot be reached; it is retried (a standby
// that restarts comes back), and names what else to do.
func (p *placement) unreachable(old server, err error) error {
	return fmt.Errorf("%w: slot %q lives on %s (recorded in outbox_slot_location): %v; the relay drains it up to the "+
		"new slot's start before it decodes on %s. Make it reachable, or keep decoding there (SetupOptions.ReplicationDSN "+
		"naming it); if it is gone for good, recreate the slot once (SetupOptions.RecreateSlot): a new slot on %s backfills "+
		"the rows still pending", ErrSlotUnreachable, p.slot, old, err, p.target, p.target)
}

func brokenMove(slot string, old, to server, fence pglogrepl.LSN) error {
	return fmt.Errorf("%w: slot %q on %s was dropped before it had delivered everything up to %s, where the new slot "+
		"on %s starts: what committed in between is in no slot (nothing later was delivered, so nothing is out of order). "+
		"Recreate the slot once (SetupOptions.RecreateSlot): the slot on %s is created again and backfills "+
		"the rows still pending (rows delivered but not yet marked done are sent again)", ErrMoveBroken, slot, old, fence, to, to)
}

// dropMovedSlot drops a move's slot on s if it is there (waiting a little for a walsender that
// is letting go of it).
// A retired slot (unreachableOK) whose server cannot be reached is left there with a warning:
// it carries nothing the new slot needs.
func dropMovedSlot(ctx context.Context, s server, slot string, unreachableOK bool, log zerolog.Logger) error {
	conn, err := s.connect(ctx)
	if err != nil {
		if unreachableOK {
			log.Warn().Err(err).Str("slot", slot).Str("server", s.String()).
				Msg("cannot reach the server of a retired slot; drop it there by hand once it is back: it holds WAL")
			return nil
		}
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := dropSlot(ctx, conn, slot); err != nil {
		return fmt.Errorf("drop slot %q on %s: %w", slot, s, err)
	}
	return nil
}
