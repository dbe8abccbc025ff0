package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// resolveSchemaWithRetry returns the schema of the relay's tables, cfg.Schema or the
// connection's current_schema() (schema.Resolve), waiting for a database that is not reachable
// yet. A schema that does not exist, or no current_schema(), is permanent (cdc.ErrSchema).
func resolveSchemaWithRetry(ctx context.Context, cfg Config, report func(error, time.Duration)) (string, error) {
	var s string
	gate := newConfigGate(cfg)
	err := retry.Do(ctx, startBackoff, func(ctx context.Context) error {
		var err error
		s, err = resolveSchema(ctx, cfg)
		return gate.check(err)
	}, report)
	if err != nil {
		return "", err
	}
	return s, nil
}

func resolveSchema(ctx context.Context, cfg Config) (string, error) {
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	s, err := schema.Resolve(ctx, conn, cfg.Schema)
	if errors.Is(err, schema.ErrNoSchema) {
		return "", fmt.Errorf("%w: %w", cdc.ErrSchema, err)
	}
	return s, err
}
