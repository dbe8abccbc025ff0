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

// reshard is safe to interrupt and re-run, and every step shows in status: --dry-run changes
// nothing; a run whose old slots cannot reach the fence (no relay streams them) stops at step 2
// with the fence recorded and the new slots created; once the old slots pass the fence (here
// advanced by hand, as a relay's confirmation would), the same command finishes: old slots and
// publications dropped, the new ones kept, the reshard marked done.
func TestReshardResumesAfterAnInterruption(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	path := writeFile(t, "shards.yaml", `pipelines:
  - name: orders
    shards: 2
    slot: ord
    publication: ordpub
    webhook: {url: "http://127.0.0.1:1/h", secret: s}
`)
	for _, s := range []string{"s0of2", "s1of2"} {
		mustExec(t, pool, "CREATE PUBLICATION ordpub_"+s+" FOR TABLE outbox_events WITH (publish = 'insert')")
		mustExec(t, pool, `SELECT pg_create_logical_replication_slot('ord_`+s+`', 'pgoutput')`)
	}
	slots := func() []string {
		rows, _ := pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'ord_%' ORDER BY 1`)
		var out []string
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			out = append(out, s)
		}
		return out
	}
	args := []string{"reshard", "--dsn", dsn, "--config", path, "--pipeline", "orders", "--to", "4"}
	out, errOut, code := cli(t, append(args, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "reshard 2 -> 4") || len(slots()) != 2 {
		t.Fatalf("dry run: exit %d, slots %v\n%s\n%s", code, slots(), out, errOut)
	}
	// Keep WAL moving past the new slots' start, so the old slots are behind the fence.
	mustExec(t, pool, `SELECT pg_logical_emit_message(false, 'x', 'y')`)
	out, errOut, code = cli(t, append(args, "--wait", "1s")...)
	if code != 1 || !strings.Contains(errOut, "run reshard again") || len(slots()) != 6 {
		t.Fatalf("interrupted run: exit %d, slots %v\n%s\n%s", code, slots(), out, errOut)
	}
	status, statusErr, _ := cli(t, "status", "--dsn", dsn, "--config", path)
	if !strings.Contains(status+statusErr, "reshard of pipeline orders from 2 to 4 shards: step 2/4") {
		t.Fatalf("status does not show step 2:\n%s\n%s", status, statusErr)
	}
	mustExec(t, pool, `SELECT pg_replication_slot_advance(slot_name, pg_current_wal_lsn()) FROM pg_replication_slots
		WHERE slot_name LIKE 'ord_s%of2'`)
	out, errOut, code = cli(t, append(args, "--wait", "30s")...)
	if code != 0 || !strings.Contains(out, "step 4/4") {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := strings.Join(slots(), " "); got != "ord_s0of4 ord_s1of4 ord_s2of4 ord_s3of4" {
		t.Fatalf("slots after the reshard: %s", got)
	}
	var pubs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'ordpub_s%of2'`).Scan(&pubs); err != nil || pubs != 0 {
		t.Fatalf("%d old publications left (%v)", pubs, err)
	}
	// Done: the command has nothing left to do.
	if out, _, code = cli(t, args...); code != 0 || !strings.Contains(out, "already has 4 shards") {
		t.Fatalf("third run: exit %d\n%s", code, out)
	}
}

// --shard and --shards of the flag pipeline: --shard needs --shards, an index beyond it and a
// bad count are usage errors naming the fix, and --shards is a per-pipeline flag with --config.
func TestFlagShardsUsage(t *testing.T) {
	env := []string{"DB_DSN=postgres://relay@127.0.0.1:1/app", "WEBHOOK_URL=http://127.0.0.1:1/h", "WEBHOOK_SECRET=s"}
	file := writeFile(t, "one.yaml", "pipelines:\n  - name: a\n    webhook: {url: \"http://127.0.0.1:1/h\", secret: s}\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--shard", "1"}, "add --shards N"},
		{[]string{"run", "--shards", "2", "--shard", "2"}, "with --shards 2, want 0 to 1"},
		{[]string{"run", "--shards", "300"}, "--shards 300: want 1 to 256"},
		{[]string{"run", "--config", file, "--shards", "2"}, "--shards is a per-pipeline setting"},
	} {
		_, stderr, code := execCLI(t, env, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}
