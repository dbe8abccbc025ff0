package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrServerLimit is wrapped when the server refuses a slot or a replication connection because
// one of its limits is reached: max_replication_slots (SQLSTATE 53400, "all replication slots
// are in use") or max_wal_senders (53300). It is not permanent: the same step succeeds once a
// slot or a WAL sender is freed, or the limit raised (which takes a restart of PostgreSQL), so
// the relay retries it. The message names the setting, the count in use and the fix.
var ErrServerLimit = errors.New("a server limit is reached")

// Limits are a server's replication limits and what counts against them now.
type Limits struct {
	Slots    int // rows of pg_replication_slots, of every database and kind
	MaxSlots int // max_replication_slots
	// WALSenders counts the walsender processes: every streaming slot, physical standby and
	// replication client holds one, and creating a slot with a snapshot holds one meanwhile.
	WALSenders    int
	MaxWALSenders int // max_wal_senders
}

// ReadLimits reads the limits and their use; any role may read them.
func ReadLimits(ctx context.Context, conn *pgx.Conn) (Limits, error) {
	var l Limits
	err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_replication_slots')::int,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'),
		current_setting('max_wal_senders')::int`).Scan(&l.Slots, &l.MaxSlots, &l.WALSenders, &l.MaxWALSenders)
	if err != nil {
		return l, fmt.Errorf("read max_replication_slots and max_wal_senders: %w", err)
	}
	return l, nil
}

// String says both counts, e.g. "10 of max_replication_slots = 10 slots in use, 10 of
// max_wal_senders = 10 WAL senders".
func (l Limits) String() string {
	return fmt.Sprintf("%d of max_replication_slots = %d slots in use, %d of max_wal_senders = %d WAL senders",
		l.Slots, l.MaxSlots, l.WALSenders, l.MaxWALSenders)
}

// sizingHint is how to size both settings, which go together.
const sizingHint = "each pipeline (and shard) needs a slot and, while it streams, a WAL sender, plus one sender " +
	"while a slot is created; size max_replication_slots and max_wal_senders for every slot and standby of the server, " +
	"then restart PostgreSQL (both take effect only at a restart)"

// slotLimitError is the error of a slot that cannot be created because all replication slots
// are in use: refused by the server with 53400 (err), or found at the limit beforehand (err nil,
// see checkSlotRoom). The counts are read over conn when it can (a refusal does not say them).
func slotLimitError(ctx context.Context, conn *pgx.Conn, slot string, err error) error {
	counts := "counts unknown"
	if l, lerr := ReadLimits(ctx, conn); lerr == nil {
		counts = l.String()
	}
	msg := fmt.Sprintf("cannot create slot %q: all replication slots are in use (%s): "+
		"drop a slot nothing uses (SELECT slot_name FROM pg_replication_slots WHERE NOT active), or raise "+
		"max_replication_slots; %s; retrying on its own meanwhile", slot, counts, sizingHint)
	if err == nil {
		return fmt.Errorf("%w: %s", ErrServerLimit, msg)
	}
	return fmt.Errorf("%w: %s (%w)", ErrServerLimit, msg, err)
}

// checkSlotRoom returns slotLimitError when every replication slot is in use, before a slot is
// created over a replication connection: that connection takes a WAL sender, and with the
// senders in use too the server would refuse it for max_wal_senders, which is not what stops
// the slot (raising max_wal_senders alone would not help). A race with another creator is
// still refused by the server, with 53400.
func checkSlotRoom(ctx context.Context, conn *pgx.Conn, slot string) error {
	l, err := ReadLimits(ctx, conn)
	if err != nil {
		return err
	}
	if l.Slots >= l.MaxSlots {
		return slotLimitError(ctx, conn, slot, nil)
	}
	return nil
}

// walSenderLimitError is the error of a replication connection the server refused with 53300,
// with the counts read over a plain connection to the same server. 53300 is also what
// max_connections and a role's or database's CONNECTION LIMIT answer, which the counts tell
// apart: with WAL senders to spare, the limit is one of those.
func walSenderLimitError(ctx context.Context, dsn string, dial pgconn.DialFunc, err error) error {
	counts, senders := "counts unknown", true
	if l, lerr := readLimitsAt(ctx, dsn, dial); lerr == nil {
		counts, senders = l.String(), l.WALSenders >= l.MaxWALSenders
	}
	if !senders {
		return fmt.Errorf("%w: the server refused the replication connection, too many connections (%s): "+
			"raise max_connections or the role's or database's CONNECTION LIMIT, or close idle connections; "+
			"retrying on its own meanwhile (%w)", ErrServerLimit, counts, err)
	}
	return fmt.Errorf("%w: cannot open a replication connection: all WAL senders are in use (%s): stop a replication "+
		"client nothing needs (SELECT pid, application_name FROM pg_stat_replication), or raise max_wal_senders; %s; "+
		"retrying on its own meanwhile (%w)", ErrServerLimit, counts, sizingHint, err)
}

// readLimitsAt reads the limits over a plain (not replication) connection to dsn.
func readLimitsAt(ctx context.Context, dsn string, dial pgconn.DialFunc) (Limits, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return Limits{}, err
	}
	if dial != nil {
		pc.DialFunc = dial
	}
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return Limits{}, err
	}
	defer conn.Close(context.Background())
	return ReadLimits(ctx, conn)
}

// isSlotLimit reports whether err is the server's refusal of a new slot for max_replication_slots.
func isSlotLimit(err error) bool { return sqlstate(err) == pgerrcode.ConfigurationLimitExceeded }

// isConnectionLimit reports whether err is a refusal for a connection limit: max_wal_senders for
// a replication connection, or max_connections or a CONNECTION LIMIT.
func isConnectionLimit(err error) bool { return sqlstate(err) == pgerrcode.TooManyConnections }
