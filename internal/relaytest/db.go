package relaytest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// NewMigratedDB creates a fresh database on the test package's cluster (see pgtest.Main),
// applies the migrations and returns its DSN. Examples use it; tests use MigratedDB.
func NewMigratedDB(ctx context.Context, prefix string) (string, error) {
	c := pgtest.SharedCluster()
	if c == nil {
		return "", errors.New("relaytest: no cluster; call pgtest.Main from TestMain")
	}
	name, err := c.CreateDatabase(ctx, prefix)
	if err != nil {
		return "", err
	}
	dsn := c.DSN(name)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		return "", err
	}
	return dsn, nil
}

// MigratedDB creates a fresh database on the test package's cluster (see pgtest.Main), applies
// the migrations, and returns its DSN and a pool on it that closes when the test ends.
func MigratedDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return dsn, pool
}

// SyncBuffer is a bytes.Buffer that goroutines may write while a test reads it: a log or
// progress destination.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
