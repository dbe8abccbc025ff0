// Command consumer is the example warehouse consumer: it mounts the inbox at /webhook and
// reserves stock once per order.created event, however often the relay delivers it.
//
//	WEBHOOK_SECRET=topsecret go run ./examples/consumer --dsn "$DB_DSN" [--retention 720h]
//
// It installs inbox_events itself at start (inboxmigrate.Migrate), so its database needs nothing from
// the relay. Point the relay's --webhook-url at http://127.0.0.1:8080/webhook with the same
// secret. --retention prunes inbox_events rows older than that, hourly; an event the relay
// sends again after its row is pruned is applied again, so keep it longer than the relay keeps
// delivered events (see docs/guides/consuming-webhooks.md, Pruning the inbox).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/examples/consumer/warehouse"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := zerolog.New(os.Stderr).With().Timestamp().Str("service", "warehouse").Logger()
	cfg, err := parseConfig(os.Args[1:], os.LookupEnv)
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %v\n", err)
		os.Exit(2)
	}
	if err := run(ctx, cfg, log); err != nil {
		log.Error().Err(err).Msg("consumer stopped")
		os.Exit(1)
	}
}

// config is the consumer's command line, resolved against the environment.
type config struct {
	dsn       string
	listen    string
	secrets   []string
	retention time.Duration
}

// parseConfig reads flags, falling back to DB_DSN and WEBHOOK_SECRET; a flag wins over its
// variable.
func parseConfig(args []string, lookupEnv func(string) (string, bool)) (config, error) {
	fs := pflag.NewFlagSet("consumer", pflag.ContinueOnError)
	dsn := fs.String("dsn", "", "PostgreSQL connection string (env DB_DSN; required)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve /webhook, /healthz and /readyz on")
	secret := fs.String("webhook-secret", "", "the relay's webhook secret(s), comma-separated during a rotation (env WEBHOOK_SECRET; required)")
	retention := fs.Duration("retention", 0, "prune inbox_events rows received longer ago than this, hourly; 0 keeps every row (at least 48h)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := config{dsn: fromEnv(fs, "dsn", *dsn, "DB_DSN", lookupEnv), listen: *listen, retention: *retention,
		secrets: signature.SplitSecrets(fromEnv(fs, "webhook-secret", *secret, "WEBHOOK_SECRET", lookupEnv))}
	if cfg.dsn == "" {
		return config{}, errors.New("no database: set DB_DSN or pass --dsn postgres://user@host:5432/db")
	}
	if len(cfg.secrets) == 0 {
		return config{}, errors.New("no webhook secret: set WEBHOOK_SECRET or pass --webhook-secret (the relay's secret)")
	}
	return cfg, nil
}

func fromEnv(fs *pflag.FlagSet, flag, value, env string, lookupEnv func(string) (string, bool)) string {
	if fs.Changed(flag) {
		return value
	}
	if v, ok := lookupEnv(env); ok && v != "" {
		return v
	}
	return value
}

// run serves the consumer until ctx is done.
func run(ctx context.Context, cfg config, log zerolog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.dsn)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	srv, err := warehouse.New(ctx, pool, cfg.secrets, inbox.Config{Logger: log, Retention: cfg.retention})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /webhook, /healthz, /readyz")
	return srv.Serve(ctx, ln)
}
