package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/demo"
)

func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline locally and watch it deliver, fail and recover",
		Long: fmt.Sprintf(`Starts a throwaway PostgreSQL with wal_level=logical (from the local server binaries; run
from a checkout of the source, a missing server is fetched once into a cache), applies the
schema, and runs a small warehouse consumer (on package inbox) and the relay in this process,
with three pipelines: every order to the warehouse, only big orders (a row filter on the
publication) to an audit endpoint, and one run with endpoints that fans its one slot out to
four partner endpoints (rows of outbox_endpoints, each with its own secret and receiver):
acme's, globex's and initech's orders to them by tenant (initech's signed the Standard Webhooks
way), every tenant's orders to ledger. At the end it prints what each partner received against
what its subscription should give it.
It then writes orders at a steady rate, each with its outbox event in one transaction, and
shows a live status: written, delivered, duplicates absorbed by the inbox, reservations, lag,
p99 latency and retries. Every %s the consumer fails for %s, and 1 in %d of its answers
is lost after it committed, so retries, catch-up and redelivery are visible.

Ctrl-C (or --duration) stops writing, waits for the last deliveries, prints a summary line and
removes everything it started. With DB_DSN set it uses that database instead and drops only
its own slots and publications, %s, %s and %s, and its endpoints.

With --nats the warehouse pipeline publishes to NATS JetStream instead: the demo starts a real
nats-server (on PATH, or $%s; Debian: %s; run from a checkout of the
source, a missing one is built once from its Go module into a cache) with JetStream on a
temporary store, the relay creates the stream %s, and the warehouse reads it through a durable
consumer that applies each message once (inbox_events, one transaction) before it acks. The
outage is then the broker's: nats-server is killed for %s every %s and restarted on the same
port and store.`, demo.DefaultFailEvery, demo.DefaultFailFor,
			demo.DefaultLoseEvery, demo.Slot, demo.AuditSlot, demo.PartnersSlot, demo.NATSServerEnv, demo.NATSInstallHint, demo.NATSStream,
			demo.DefaultFailFor, demo.DefaultFailEvery),
		Example: `  outbox-relay demo                    # until Ctrl-C
  outbox-relay demo --duration 1m --rate 200
  outbox-relay demo --nats             # through a real nats-server with JetStream
  DB_DSN=postgres://postgres@localhost:5432/scratch outbox-relay demo`,
	}
	fs := cmd.Flags()
	fs.String(dsnFlag.name, "", "use this database instead of a throwaway cluster; it needs wal_level=logical (env DB_DSN; optional)")
	fs.Duration("duration", 0, "stop after writing for this long; 0 runs until Ctrl-C")
	fs.Float64("rate", demo.DefaultRate, "orders written per second")
	fs.Bool("nats", false, "publish to NATS JetStream on a nats-server the demo starts (on PATH or $"+demo.NATSServerEnv+", else built into a cache), with broker restarts as the outages")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := demoConfig(fs)
		if err != nil {
			return err
		}
		cfg.Out = cmd.OutOrStdout()
		cfg.IsTTY = isTerminal(cfg.Out)
		return demo.Run(cmd.Context(), cfg)
	}
	return cmd
}

// demoConfig turns flags and environment into a demo.Config.
func demoConfig(fs *pflag.FlagSet) (demo.Config, error) {
	var cfg demo.Config
	cfg.DSN = stringFrom(fs, dsnFlag)
	cfg.Duration, _ = fs.GetDuration("duration")
	cfg.Rate, _ = fs.GetFloat64("rate")
	cfg.NATS, _ = fs.GetBool("nats")
	if cfg.Duration < 0 {
		return cfg, usageError{fmt.Errorf("--duration must not be negative; 0 runs until Ctrl-C")}
	}
	if cfg.Rate <= 0 {
		return cfg, usageError{fmt.Errorf("--rate must be a positive number of orders per second, e.g. --rate 50")}
	}
	return cfg, nil
}
