package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outbox-relay/outbox-relay/relay"
)

// benchShards are the shard counts of the shard rows.
var benchShards = []int{1, 2, 4}

func shardRow(n int) string {
	if n == 1 {
		return "Backlog drain, 1 shard"
	}
	return fmt.Sprintf("Backlog drain, %d shards", n)
}

// shardPipeline is the bench pipeline split into n shards (1: not sharded).
func shardPipeline(n int) relay.Pipeline {
	return relay.Pipeline{Name: "bench", Slot: relaySlot, Publication: benchPublication, Shards: n}
}

// createShards creates each shard's publication (with its hash row filter) and then its slot,
// so that the backlog written afterwards is in every shard's slot, as drain needs.
func (db *benchDB) createShards(ctx context.Context, n int) error {
	shards := shardPipeline(n).ShardPipelines()
	if n == 1 {
		_, err := db.conn.Exec(ctx, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", relaySlot))
		return err
	}
	var stmts []string
	for _, p := range shards {
		stmts = append(stmts, "CREATE PUBLICATION "+p.Publication+" FOR TABLE outbox_events WHERE ("+p.Filter+
			") WITH (publish = 'insert')")
	}
	for _, p := range shards {
		stmts = append(stmts, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", p.Slot))
	}
	for _, s := range stmts {
		if _, err := db.conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// startShards runs one relay process with every shard of the n-shard bench pipeline.
func (e *env) startShards(ctx context.Context, db *benchDB, n int) (*relayProc, error) {
	dir, err := os.MkdirTemp("", "outbox-bench-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // the relay reads it at start, before startRelay returns
	path := filepath.Join(dir, "pipelines.yaml")
	conf := fmt.Sprintf(`pipelines:
  - name: bench
    shards: %d
    slot: %s
    publication: %s
    webhook: {url: "%s", secret: "%s"}
    max_in_flight: %d
`, n, relaySlot, benchPublication, e.recv.hookURL(), benchSecret, concurrency)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return startRelay(ctx, e.relayBin, relayTarget{DSN: db.dsn, Config: path})
}

// shardCells reports a shard row, with the walsenders' CPU beside the relay's and the server's.
func (r *results) shardCells(n int, d *drainResult) []string {
	note := fmt.Sprintf("%d shard(s) in one relay process, %d walsender(s) each decoding all WAL: walsenders %s CPU-s per 100k",
		n, n, per100k(d.Load.PG.ByClass[pgWalsender], d.Events))
	if n > 1 {
		note += "; on 2 cores this is the cost of N, not a speed-up"
	}
	return r.drainCells(d, note)
}
