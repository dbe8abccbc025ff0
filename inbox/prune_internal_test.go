package inbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Each prune batch finds its rows through the partial index of the inbox's migration 2, not by
// scanning every row: on a table of 100,000 rows of which 2,000 are old, the plan of a batch
// names the index.
func TestPruneBatchUsesTheIndex(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if _, err := migrations.UpInbox(ctx, db, ""); err != nil { // (inboxmigrate.Migrate, which imports this package)
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		INSERT INTO inbox_events (id, received_at, processed_at, handler_status, payload)
		SELECT gen_random_uuid(), now() - make_interval(mins => i), now(), 'done', '{"n":1}'
		FROM generate_series(1, 100000) i;
		ANALYZE inbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-98000 * time.Minute)
	rows, err := pool.Query(ctx, "EXPLAIN "+fmt.Sprintf(pruneBatchSQL, tableName("")), cutoff, DefaultPruneBatchSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "idx_inbox_done_received") {
		t.Fatalf("a prune batch does not use idx_inbox_done_received:\n%s", p)
	}
}
