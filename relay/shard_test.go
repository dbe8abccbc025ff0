package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cdc"
)

func intp(i int) *int { return &i }

func shardPipe(name string, shards int, shard *int) Pipeline {
	return Pipeline{Name: name, WebhookURL: "http://127.0.0.1:1/h", Secrets: []string{"s"}, Shards: shards, Shard: shard}
}

func TestShardExpansion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pipes   []Pipeline
		shard   *int
		want    []string // name slot publication filter-suffix labels owner
		wantErr string
	}{
		{name: "four shards, all run", pipes: []Pipeline{shardPipe("orders", 4, nil)}, want: []string{
			"orders_s0of4 outbox_relay_orders_s0of4 outbox_relay_orders_s0of4 =0 pipeline=orders,shard=0 owner",
			"orders_s1of4 outbox_relay_orders_s1of4 outbox_relay_orders_s1of4 =1 pipeline=orders,shard=1 owner",
			"orders_s2of4 outbox_relay_orders_s2of4 outbox_relay_orders_s2of4 =2 pipeline=orders,shard=2 owner",
			"orders_s3of4 outbox_relay_orders_s3of4 outbox_relay_orders_s3of4 =3 pipeline=orders,shard=3 owner"}},
		{name: "--shard picks one of each sharded pipeline, the unsharded one runs whole", shard: intp(1),
			pipes: []Pipeline{shardPipe("orders", 2, nil), shardPipe("audit", 0, nil)}, want: []string{
				"orders_s1of2 outbox_relay_orders_s1of2 outbox_relay_orders_s1of2 =1 pipeline=orders,shard=1 owner",
				"audit outbox_relay_audit outbox_relay_audit - pipeline=audit,shard=0 -"}},
		{name: "a pipeline's own shard wins over --shard", shard: intp(0),
			pipes: []Pipeline{shardPipe("orders", 3, intp(2))}, want: []string{
				"orders_s2of3 outbox_relay_orders_s2of3 outbox_relay_orders_s2of3 =2 pipeline=orders,shard=2 owner"}},
		{name: "given slot and publication get the suffix", pipes: []Pipeline{func() Pipeline {
			p := shardPipe("orders", 2, intp(0))
			p.Slot, p.Publication = "s", "p"
			return p
		}()}, want: []string{"orders_s0of2 s_s0of2 p_s0of2 =0 pipeline=orders,shard=0 owner"}},
		{name: "no sharded pipeline: no shard label", pipes: []Pipeline{shardPipe("orders", 1, nil)},
			want: []string{"orders outbox_relay_orders outbox_relay_orders - pipeline=orders owner"}},
		{name: "--shard beyond the count", shard: intp(4), pipes: []Pipeline{shardPipe("orders", 4, nil)},
			wantErr: "shard 4 does not exist: with shards 4, shard is 0 to 3 (from --shard)"},
		{name: "--shard without a sharded pipeline", shard: intp(0), pipes: []Pipeline{shardPipe("orders", 0, nil)},
			wantErr: "no pipeline is sharded"},
		{name: "too many shards", pipes: []Pipeline{shardPipe("orders", MaxShards+1, nil)}, wantErr: "want 1 to 256"},
		{name: "shard name collides with a pipeline", pipes: []Pipeline{shardPipe("orders", 2, nil), shardPipe("orders_s1of2", 0, nil)},
			wantErr: `two pipelines are named "orders_s1of2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Pipelines: tc.pipes, Shard: tc.shard}
			ps, err := cfg.pipelines()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				filter := "-"
				if p.Filter != "" {
					filter = p.Filter[strings.LastIndex(p.Filter, " = ")+2:]
					filter = "=" + strings.TrimSpace(filter[1:])
				}
				l := p.labels()
				labels := "pipeline=" + l["pipeline"]
				if s, ok := l["shard"]; ok {
					labels += ",shard=" + s
				}
				owner := "-"
				if p.ownsStatus {
					owner = "owner"
				}
				got = append(got, strings.Join([]string{p.Name, p.Slot, p.Publication, filter, labels, owner}, " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestShardFilterKeepsTheUserFilter(t *testing.T) {
	t.Parallel()
	got := ShardFilter("event_type LIKE 'order%'", 4, 3)
	want := "(event_type LIKE 'order%') AND ((hashtextextended(aggregate_type || ':' || aggregate_id, 0) % 4) + 4) % 4 = 3"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// PostgreSQL accepts every shard's filter in a publication, and the shards partition the rows:
// each row matches exactly one shard's filter, and that shard is what the consumer's documented
// query computes. Hashes near the int8 limits are included (abs() there would overflow).
func TestShardFiltersPartitionTheRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const n = 5
	filters := map[string]string{}
	for i := range n {
		filters[ShardName("p", n, i)] = ShardFilter("event_type <> 'skip'", n, i)
	}
	canon, err := cdc.ValidateFilters(ctx, e.dsn, "", filters)
	if err != nil {
		t.Fatal(err)
	}
	if len(canon) != n {
		t.Fatalf("%d canonical filters, want %d", len(canon), n)
	}
	var sum []string
	for i := range n {
		sum = append(sum, fmt.Sprintf("(CASE WHEN %s THEN 1 ELSE 0 END)", filters[ShardName("p", n, i)]))
	}
	var rows, bad, mismatch, used, maxShard int
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// 2,000 keys in a table of the outbox's shape, so the filter text applies verbatim.
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE keys AS
		SELECT 'type' || (g % 7) AS aggregate_type, 'agg-' || g AS aggregate_id, 'x' AS event_type
		FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf(`SELECT count(*),
		count(*) FILTER (WHERE %[1]s <> 1),
		count(*) FILTER (WHERE NOT (%[2]s)),
		count(DISTINCT ((hashtextextended(aggregate_type || ':' || aggregate_id, 0) %% %[3]d) + %[3]d) %% %[3]d),
		max(((hashtextextended(aggregate_type || ':' || aggregate_id, 0) %% %[3]d) + %[3]d) %% %[3]d)
		FROM keys`, strings.Join(sum, " + "), consumerCheck(n), n)
	if err := conn.QueryRow(ctx, q).Scan(&rows, &bad, &mismatch, &used, &maxShard); err != nil {
		t.Fatal(err)
	}
	if rows != 2000 || bad != 0 || mismatch != 0 || used != n || maxShard != n-1 {
		t.Fatalf("rows %d, in not exactly one shard %d, consumer's shard differs %d, shards used %d, max %d",
			rows, bad, mismatch, used, maxShard)
	}
	// The extremes of int8: the floored modulo stays in range where abs() would fail.
	var lo, hi int
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (('-9223372036854775808'::int8 %% %[1]d) + %[1]d) %% %[1]d,
		(('9223372036854775807'::int8 %% %[1]d) + %[1]d) %% %[1]d`, n)).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo < 0 || lo >= n || hi < 0 || hi >= n {
		t.Fatalf("extremes map to shards %d and %d, want 0..%d", lo, hi, n-1)
	}
}

// consumerCheck is the SQL truth that the row's shard filter, chosen by the consumer's formula,
// matches: the filter of shard k, for k the documented shard of the row.
func consumerCheck(n int) string {
	var cases []string
	for i := range n {
		cases = append(cases, fmt.Sprintf("WHEN %d THEN %s", i, ShardFilter("event_type <> 'skip'", n, i)))
	}
	return fmt.Sprintf("CASE ((hashtextextended(aggregate_type || ':' || aggregate_id, 0) %% %d) + %d) %% %d %s END",
		n, n, n, strings.Join(cases, " "))
}
