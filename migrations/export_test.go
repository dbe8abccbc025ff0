package migrations

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// UpTo applies the migrations up to version v, as UpWith does (in the connection's
// current_schema()), without the checks that come before.
func UpTo(ctx context.Context, dsn string, v int64) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	db := open(cfg, "public")
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, v)
	return err
}
