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
		fmt.Fprintf(os.Stderr, "outbox-relay: %v\nRun 'outbox-relay --help' for usage.\n", err)
		return exitUsage
	}
	fmt.Fprintf(os.Stderr, "outbox-relay: %v\n", err)
	return 1
}
