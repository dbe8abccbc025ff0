package inbox

import (
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool is a connection pool of either driver world, as Prune (and inboxmigrate.Migrate) take it: a
// *pgxpool.Pool, or a *sql.DB of any PostgreSQL driver.
type Pool interface {
	*pgxpool.Pool | *sql.DB
}

// poolStore is the store of a Pool, for Prune.
func poolStore[P Pool](db P) (store, error) {
	switch d := any(db).(type) {
	case *pgxpool.Pool:
		if d != nil {
			return pgxStore{db: d}, nil
		}
	case *sql.DB:
		if d != nil {
			return sqlStore{db: d}, nil
		}
	}
	return nil, errNilDB
}
