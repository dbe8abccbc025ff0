package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Move is a move of a slot between two servers of one cluster (the primary and a hot standby,
// either way), as Setup found it: the slot still lives on From while the relay is configured to
// decode on To (docs/guides/failover.md). Pass it to the
// stream as Config.Move.
//
// Setup created the new slot on To; its start is the fence. The stream first streams the old
// slot, as usual, until it has confirmed the fence: every transaction that ends at or before it
// is then delivered, and the new slot carries every later one. It records that on the primary,
// drops the old slot, and goes on with the new one from where its tracker stands: the two slots
// decode the same WAL, so positions mean the same on both, and what the old slot already sent
// after the fence is skipped as after any reconnect. Nothing is lost and nothing is reordered;
// a crash at any step resumes from the record (outbox_slot_location) and the slots.
type Move struct {
	// From and To name the servers, as logs do: "the primary" or "standby host:port".
	From, To string
	// Fence is the new slot's start.
	Fence pglogrepl.LSN

	slot    string
	primary string // DSN of the primary, which holds the record
	schema  string // the schema of the relay's tables there, which holds it
	old     server
}

// errFenceReached ends a session on a move's old slot once it has confirmed the fence.
var errFenceReached = errors.New("the old slot confirmed the move's fence")

// sessionTarget is where one session streams from.
type sessionTarget struct {
	cfg       *pgconn.Config
	limitsDSN string        // where to read the server's limits when it refuses the connection (see connectReplication)
	standby   bool          // the server may be in recovery
	fence     pglogrepl.LSN // with a move: end the session once this is confirmed
}

// target returns the server and slot the next session streams: a move's old slot until the
// move is done, then the configured one.
func (s *Stream) target(ctx context.Context) (sessionTarget, error) {
	if s.move != nil {
		if err := s.refreshMove(ctx); err != nil {
			return sessionTarget{}, err
		}
	}
	if m := s.move; m != nil {
		cfg, err := m.old.pgconnConfig()
		limits := m.old.dsn
		if m.old.recorded {
			limits = ""
		}
		return sessionTarget{cfg: cfg, limitsDSN: limits, standby: m.old.isStandby(), fence: m.Fence}, err
	}
	cfg, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return sessionTarget{}, badDSN(err)
	}
	return sessionTarget{cfg: cfg, limitsDSN: s.cfg.DSN, standby: s.cfg.AllowStandby}, nil
}

// refreshMove reads the move's record: another process may have finished it (or reached the
// fence and not yet dropped the old slot, which this one then does), or the new slot may have
// been recreated with a later start.
func (s *Stream) refreshMove(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.move.primary)
	if err != nil {
		return fmt.Errorf("connect to the primary to read the slot's move: %w", err)
	}
	defer conn.Close(context.Background())
	loc, err := state.ReadLocation(ctx, conn, s.move.schema, s.move.slot)
	switch {
	case err != nil:
		return err
	case !loc.Moving:
		s.log.Info().Str("slot", s.cfg.Slot).Str("to", s.move.To).Msg("the slot's move is done; streaming the new slot")
		s.move = nil
	case loc.Reached:
		return s.completeMove(ctx, conn)
	default:
		s.move.Fence = loc.Fence
	}
	return nil
}

// fenceReached reports, on the session's replication connection to the old server, whether the
// old slot has confirmed the fence already (a restart after delivering up to it).
func fenceReached(ctx context.Context, conn *pgconn.PgConn, slot string, fence pglogrepl.LSN) (bool, error) {
	res, err := conn.Exec(ctx, `SELECT confirmed_flush_lsn >= `+quoteLiteral(fence.String())+`::pg_lsn
		FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(slot)).ReadAll()
	if err != nil {
		return false, fmt.Errorf("read the old slot's position: %w", err)
	}
	return len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t", nil
}

// retireOld runs once a session on the old slot ended at the fence: it records that the fence
// is reached, drops the old slot and lets the next session stream the new one.
func (s *Stream) retireOld(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.move.primary)
	if err != nil {
		return fmt.Errorf("connect to the primary to record the slot's move: %w", err)
	}
	defer conn.Close(context.Background())
	if err := state.MarkReached(ctx, conn, s.move.schema, s.move.slot); err != nil {
		return err
	}
	return s.completeMove(ctx, conn)
}

// completeMove drops the old slot and records the move as done.
func (s *Stream) completeMove(ctx context.Context, primary *pgx.Conn) error {
	m := s.move
	if err := dropMovedSlot(ctx, m.old, m.slot, true, s.log); err != nil {
		return err
	}
	if err := state.FinishMove(ctx, primary, m.schema, m.slot); err != nil {
		return err
	}
	s.log.Info().Str("slot", s.cfg.Slot).Str("from", m.From).Str("to", m.To).Str("fence", m.Fence.String()).
		Msg("slot moved: the old slot delivered everything up to the fence and is dropped; decoding on the new slot")
	s.move = nil
	return nil
}

// oldSlotGone explains a missing old slot during a move: dropped by the process that finished
// the move (the next session streams the new slot), or by hand before the fence.
func (s *Stream) oldSlotGone(orig error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.move.primary)
	if err != nil {
		return fmt.Errorf("start replication: %w (and reading the slot's move failed: %v)", orig, err)
	}
	defer conn.Close(context.Background())
	loc, err := state.ReadLocation(ctx, conn, s.move.schema, s.move.slot)
	switch {
	case err != nil:
		return fmt.Errorf("start replication: %w (and reading the slot's move failed: %v)", orig, err)
	case !loc.Moving || loc.Reached:
		return fmt.Errorf("old slot of the move is gone: %w (the move is done; continuing on the new slot)", orig)
	}
	return brokenMove(s.move.slot, s.move.old, recordedServer(s.move.primary, loc.MoveTo), loc.Fence)
}

// endAtFence ends replication on the old slot cleanly, so that the server has applied the
// status update that confirmed the fence before the slot is dropped.
func (l *loop) endAtFence() error {
	_ = l.conn.Conn().SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := pglogrepl.SendStandbyCopyDone(context.Background(), l.conn); err != nil {
		return fmt.Errorf("end replication at the move's fence: %w", err)
	}
	l.s.log.Info().Str("slot", l.s.cfg.Slot).Str("fence", l.fence.String()).Str("confirmed", l.sent.String()).
		Msg("the old slot confirmed the move's fence")
	return errFenceReached
}
