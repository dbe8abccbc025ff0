package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// FailoverMode is the --failover setting: whether the slot is a PostgreSQL 17 failover slot,
// which standbys with sync_replication_slots = on keep a copy of, so that it survives a
// promotion.
type FailoverMode int

const (
	// FailoverAuto (the zero value) makes the slot a failover slot on PostgreSQL 17 and later
	// and leaves it alone before.
	FailoverAuto FailoverMode = iota
	// FailoverOn requires PostgreSQL 17 (ErrFailoverUnsupported before).
	FailoverOn
	// FailoverOff makes it an ordinary slot (turning failover off on an existing slot).
	FailoverOff
)

// ErrFailoverUnsupported is returned when --failover=true meets a server older than 17.
var ErrFailoverUnsupported = errors.New("failover slots need PostgreSQL 17 or later")

// failoverRetryMax bounds how long setting the option waits for a slot that another process
// streams from; after that the relay starts anyway and says so.
const failoverRetryMax = 30 * time.Second

// SlotFailoverVersion is the first server_version_num with failover slots.
const SlotFailoverVersion = 170000

// createSlotCommand is the replication command that creates slot as a pgoutput slot, with the
// failover option on 17+ when failover is set. snapshot is "" or a SNAPSHOT action ('export',
// 'use', 'nothing'). Parse its result with pglogrepl.ParseCreateReplicationSlot.
func createSlotCommand(slot, snapshot string, failover bool) string {
	var opts []string
	if snapshot != "" {
		opts = append(opts, "SNAPSHOT '"+snapshot+"'")
	}
	if failover {
		opts = append(opts, "FAILOVER true")
	}
	cmd := "CREATE_REPLICATION_SLOT " + pgx.Identifier{slot}.Sanitize() + " LOGICAL pgoutput"
	if len(opts) > 0 {
		cmd += " ("
		for i, o := range opts {
			if i > 0 {
				cmd += ", "
			}
			cmd += o
		}
		cmd += ")"
	}
	return cmd
}

// alterFailoverCommand is the replication command that sets slot's failover option (17+).
func alterFailoverCommand(slot string, on bool) string {
	return fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER %t)", pgx.Identifier{slot}.Sanitize(), on)
}

// FailoverResult is what applyFailover did.
type FailoverResult struct {
	// Supported is true on PostgreSQL 17+.
	Supported bool
	// On is the slot's failover option as it now is.
	On bool
	// Changed is true when the option was altered.
	Changed bool
	// Pending is set when the slot stayed active in another process for failoverRetryMax and
	// the option could not be changed; the relay runs without it.
	Pending bool
}

// applyFailover brings the existing slot's failover option in line with mode: on 17+ it is on
// unless mode is FailoverOff. The option is changed with ALTER_REPLICATION_SLOT over a
// replication connection, which needs the slot to be free: while another process streams from
// it (SQLSTATE 55006), it is retried for up to failoverRetryMax.
func applyFailover(ctx context.Context, dsn string, conn *pgx.Conn, slot string, mode FailoverMode,
	log zerolog.Logger) (FailoverResult, error) {
	var res FailoverResult
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return res, fmt.Errorf("read server version: %w", err)
	}
	if num < SlotFailoverVersion {
		if mode == FailoverOn {
			return res, fmt.Errorf("%w (this server is %d): turn the failover option off, or upgrade; "+
				"before 17 a promoted standby has no slot, and a new one must backfill the pending rows", ErrFailoverUnsupported, num)
		}
		return res, nil
	}
	res.Supported = true
	want := mode != FailoverOff
	if err := conn.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&res.On); err != nil {
		return res, fmt.Errorf("read failover option of slot %q: %w", slot, err)
	}
	if res.On == want {
		return res, nil
	}
	// ALTER_REPLICATION_SLOT acquires the slot: on 17 it waits for a holder to let go (on other
	// versions it may fail with 55006 instead). So it is sent only while the slot looks free,
	// bounded by a timeout, and retried while another process streams from it.
	deadline := time.Now().Add(failoverRetryMax)
	wait := 100 * time.Millisecond
	for {
		var active bool
		err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		if err != nil {
			return res, fmt.Errorf("read slot %q: %w", slot, err)
		}
		if !active {
			err = alterFailover(ctx, dsn, slot, want)
			if err == nil {
				res.On, res.Changed = want, true
				return res, nil
			}
			if sqlstate(err) != "55006" && !errors.Is(err, context.DeadlineExceeded) && sqlstate(err) != "57014" {
				return res, fmt.Errorf("set failover %t on slot %q (%s): %w", want, slot, alterFailoverCommand(slot, want), err)
			}
		}
		if time.Now().After(deadline) {
			log.Warn().Str("slot", slot).Bool("failover", want).Msg("slot stayed active in another process; " +
				"its failover option is unchanged (restart the relay that holds it to apply it)")
			res.Pending = true
			return res, nil
		}
		log.Info().Str("slot", slot).Dur("retry_in", wait).Msg("slot active in another process; waiting to set its failover option")
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}

func alterFailover(ctx context.Context, dsn, slot string, on bool) error {
	repl, err := (&Stream{cfg: Config{DSN: dsn}}).connect(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = repl.Exec(ctx, alterFailoverCommand(slot, on)).ReadAll()
	return err
}

// errOnStandby is returned by a session whose replication connection reached a server in
// recovery while the stream is meant for the primary: a standby that was not promoted must
// never be streamed from (its slot is a synced copy, or missing). It is retried like a lost
// connection: a DSN listing several hosts with target_session_attrs=read-write reaches the new
// primary once a standby is promoted.
var errOnStandby = errors.New("the replication connection reached a standby (in recovery), not the primary")

// checkPrimary returns errOnStandby when conn's server is in recovery.
func checkPrimary(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, "SELECT pg_is_in_recovery()").ReadAll()
	if err != nil {
		return fmt.Errorf("check recovery state: %w", err)
	}
	if len(res) == 1 && len(res[0].Rows) == 1 && string(res[0].Rows[0][0]) == "t" {
		return fmt.Errorf("%w: waiting for it to be promoted or for the DSN to reach the primary "+
			"(list every host with target_session_attrs=read-write; give a separate replication DSN to decode on a standby on purpose)",
			errOnStandby)
	}
	return nil
}
