package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// resolveSchemaWithRetry returns the schema of the relay's tables, cfg.Schema or the
// connection's current_schema() (schema.Resolve), waiting for a database that is not reachable
// yet. A schema that does not exist, or no current_schema(), is permanent (cdc.ErrSchema).
func resolveSchemaWithRetry(ctx context.Context, cfg Config) (string, error) {
	wait := 200 * time.Millisecond
	for {
		s, err := resolveSchema(ctx, cfg)
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if err == nil || permanent(err) {
			return s, err
		}
		cfg.Logger.Warn().Err(err).Dur("retry_in", wait).Msg("database not ready; retrying")
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
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
