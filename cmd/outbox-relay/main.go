// Command outbox-relay streams committed outbox rows from a PostgreSQL logical replication slot
// to a webhook, signed, in order per aggregate, confirming the slot only after delivery.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/diagnose"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// exitUsage is the exit code for an unknown subcommand or flag.
const exitUsage = 2

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		// The message names the fix (the flag or variable to set, or the --help that lists the
		// flags of the command at fault); nothing else is printed.
		fmt.Fprintf(os.Stderr, "outbox-relay: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(os.Stderr, "outbox-relay: %v\n", explain(err))
	return 1
}

// explain replaces an error whose cause an operator fixes in the configuration with one line
// that names the fix. pgx reports a failed connection with every address it tried (and, with the
// default sslmode, a TLS attempt the server refused before the real cause), none of which helps:
// the diagnosis (internal/diagnose) says the one cause and its fix.
func explain(err error) error {
	// The libraries describe the problem; the command line's way to fix it is added here.
	switch {
	case errors.Is(err, cdc.ErrSlotInvalid):
		return fmt.Errorf("%w; with outbox-relay: run once with --recreate-slot, or drop the slot and start again (a new slot backfills)", err)
	case errors.Is(err, cdc.ErrFailoverUnsupported):
		return fmt.Errorf("%w (with outbox-relay: --failover=false)", err)
	case errors.Is(err, cdc.ErrStandbyUnsupported):
		return fmt.Errorf("%w (with outbox-relay: the replication DSN is --replication-dsn, the failover option --failover)", err)
	case errors.Is(err, cdc.ErrRecreateSlot), errors.Is(err, cdc.ErrMoveBroken):
		return fmt.Errorf("%w (with outbox-relay: run once with --recreate-slot)", err)
	case errors.Is(err, cdc.ErrSlotMismatch):
		return fmt.Errorf("%w (pass it with --slot)", err)
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) { // every command's connection string, whichever path parsed it
		return replaced{err, fmt.Sprintf("the connection string (DB_DSN or --dsn) cannot be parsed: %v; %s", pe, diagnose.DSNFix(pe))}
	}
	if errors.Is(err, cdc.ErrBadDSN) {
		return fmt.Errorf("%w (set DB_DSN or --dsn to a postgres:// URL)", err)
	}
	p, ok := diagnose.Connect(err)
	switch {
	case ok && p.Fix != "":
		return fmt.Errorf("%w (the connection string is DB_DSN or --dsn)", p)
	case ok && !errors.Is(err, cdc.ErrServerLimit): // a server limit's own message names the setting
		return p
	}
	return err
}

// replaced is an error shown with another message, still matching what it wraps.
type replaced struct {
	err error
	msg string
}

func (r replaced) Error() string { return r.msg }
func (r replaced) Unwrap() error { return r.err }
