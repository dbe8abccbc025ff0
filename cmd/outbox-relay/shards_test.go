package main

import (
	"context"
	"strings"
	"testing"
)

// status and drop-pipeline see a sharded pipeline as its shards: status lists each shard (and
// --pipeline with the pipeline's name narrows to all of them), and drop-pipeline drops one
// shard's slot by the shard's name, with the slot name the file implies.
func TestStatusAndDropPipelineKnowShards(t *testing.T) {
	dsn, pool := migratedDB(t)
	path := writeFile(t, "shards.yaml", `pipelines:
  - name: orders
    shards: 2
    slot: ord
    webhook: {url: "http://127.0.0.1:1/h", secret: s}
`)
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('ord_s1of2', 'pgoutput')`)
	out, errOut, _ := cli(t, "status", "--dsn", dsn, "--config", path, "--pipeline", "orders")
	for _, want := range []string{"orders_s0of2", "orders_s1of2", "ord_s1of2"} {
		if !strings.Contains(out+errOut, want) {
			t.Fatalf("status --pipeline orders does not mention %s:\n%s\n%s", want, out, errOut)
		}
	}
	out, errOut, code := cli(t, "drop-pipeline", "--dsn", dsn, "--config", path, "orders_s1of2")
	if code != 0 || !strings.Contains(out, "slot ord_s1of2 dropped") {
		t.Fatalf("drop-pipeline orders_s1of2: exit %d\n%s\n%s", code, out, errOut)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ord_s1of2'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("slot still there (%d, %v)", n, err)
	}
}
