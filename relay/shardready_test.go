package relay

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A shard pod (--shard I) that comes back while a standby pod (no --shard) holds its slot is a
// ready standby: /readyz answers 200 and says so, since the shard is served and a not-ready pod
// would hold every rollout and the PodDisruptionBudget. When the standby pod goes, each shard
// pod takes its own shard over and everything arrives, in order. (Before, the pod stayed 503
// "not streaming" for as long as the standby pod lived.)
func TestShardPodBackWhileAStandbyHoldsItsSlotIsReadyAndTakesOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pipes := []Pipeline{{Name: "orders", Shards: 2, Slot: e.slot, Publication: "pub_" + e.slot, WebhookURL: e.recv.URL,
		Secrets: []string{secret}, RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond}}
	standbyPod := e.startNoWait(func(c *Config) { c.Pipelines = pipes })
	bothActive := func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 AND active
			AND confirmed_flush_lsn IS NOT NULL`,
			e.slot+"_s%of2").Scan(&n)
		return n == 2
	}
	waitFor(t, time.Minute, "the standby pod streams both shards", bothActive)
	first := e.produce(relaytest.Workload{Events: 300, Aggregates: 40, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(first, time.Minute))

	addrs := make([]*atomic.Value, 2)
	pods := make([]*running, 2)
	for i := range 2 {
		shard := i
		addrs[i] = &atomic.Value{}
		pods[i] = e.startNoWait(func(c *Config) { c.Pipelines, c.Shard = pipes, &shard; withHTTP(addrs[i])(c) })
	}
	for i := range 2 {
		waitFor(t, 30*time.Second, fmt.Sprintf("shard pod %d a ready standby", i), func() bool {
			code, body := get(t, addrs[i], "/readyz")
			return code == 200 && strings.Contains(body, "standing by: another relay streams this shard")
		})
		if pods[i].metric(t, "outbox_relay_streaming") == 1 {
			t.Fatalf("shard pod %d streams while the standby pod holds its slot", i)
		}
	}
	if err := standbyPod.stop(t); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		waitFor(t, 30*time.Second, fmt.Sprintf("shard pod %d streams its shard", i), pods[i].streaming(t))
		waitFor(t, 10*time.Second, fmt.Sprintf("shard pod %d ready, streaming", i), func() bool {
			code, body := get(t, addrs[i], "/readyz")
			return code == 200 && strings.TrimSpace(body) == "ok"
		})
	}
	second := e.produce(relaytest.Workload{Events: 300, Aggregates: 40, MaxTxSize: 3, Type: "invoice"})
	second.Committed = append(first.Committed, second.Committed...)
	requireOK(t, e.waitDelivered(second, time.Minute))
}

// --shard works without --config: the flag pipeline split by --shards N, one process per shard
// (as pods would run them). Each process carries exactly the aggregates of its shard, on slot
// <slot>_s<i>of<N>, and everything arrives in order. (Before, --shard without --config was a
// usage error.)
func TestFlagPipelineShardsWithoutConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recvs := []*relaytest.Receiver{relaytest.NewReceiver(secret), relaytest.NewReceiver(secret)}
	for i, recv := range recvs {
		t.Cleanup(recv.Close)
		cmd := exec.Command(relaytest.RelayBinary(t), "run", "--webhook-url", recv.URL, "--webhook-secret", secret,
			"--slot", e.slot, "--publication", "pub_"+e.slot, "--shards", "2", "--shard", fmt.Sprint(i),
			"--retry-min", "10ms", "--retry-max", "200ms", "--metrics-addr", "", "--log-format", "json", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
		cmd.Stderr = testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	waitFor(t, time.Minute, "slots s0of2 and s1of2 streaming", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2) AND active
			AND confirmed_flush_lsn IS NOT NULL`,
			e.slot+"_s0of2", e.slot+"_s1of2").Scan(&n)
		return n == 2
	})
	res := e.produce(relaytest.Workload{Events: 2000, Aggregates: 100, MaxTxSize: 5, Writers: 2})
	var rep relaytest.Report
	waitFor(t, 2*time.Minute, "everything delivered", func() bool {
		rep = relaytest.Check(res, byArrival(recvs...))
		return len(rep.Lost) == 0
	})
	requireOK(t, rep)
	var aggs []string
	for _, c := range res.Committed {
		aggs = append(aggs, c.Aggregate)
	}
	shard := e.shardOf(aggs, 2)
	for i, recv := range recvs {
		if len(recv.Deliveries()) == 0 {
			t.Fatalf("shard %d delivered nothing", i)
		}
		for _, d := range recv.Deliveries() {
			if shard[d.Aggregate] != i {
				t.Fatalf("aggregate %s (shard %d) delivered by the process of shard %d", d.Aggregate, shard[d.Aggregate], i)
			}
		}
	}
}
