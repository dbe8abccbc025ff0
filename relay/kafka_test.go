package relay

import (
	"context"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// kafkaEnd returns the end offsets of topic for sampleConfirmed.
func kafkaEnd(t *testing.T, brokers, topic string) func(context.Context) (map[int]int64, bool) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func(ctx context.Context) (map[int]int64, bool) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		offs, err := kafkatest.EndOffsets(ctx, cl, topic)
		if err != nil {
			return nil, false
		}
		out := map[int]int64{}
		for p, o := range offs {
			out[int(p)] = o
		}
		return out, true
	}
}

func kafkaMsgs(t *testing.T, ctx context.Context, brokers, topic string) []brokerMsg {
	var out []brokerMsg
	for _, r := range kafkatest.ReadTopic(ctx, t, brokers, topic) {
		h := r.Headers
		m := newBrokerMsg(t, int(r.Partition), r.Offset, func(k string) string { return h[k] }, r.Value)
		if m.ID != h["id"] || string(r.Key) != strings.SplitN(m.Aggregate, "/", 2)[1] {
			t.Fatalf("record %d/%d: id header %q and key %q do not match the event %s of %s", r.Partition, r.Offset,
				h["id"], r.Key, m.ID, m.Aggregate)
		}
		out = append(out, m)
	}
	return out
}

// 10k events over 100 aggregates to Kafka (franz-go's kfake, three brokers, eight partitions,
// persisted) with the relay binary SIGKILLed three times and the whole cluster restarted once
// mid-stream: every event in the topic, first appearances in commit order per aggregate, and
// the slot never confirmed past an event the topic did not hold.
//
// Batched (many records produced at once, each acknowledged on its own), the same must hold.
func TestKafkaSIGKILLAndClusterRestartLoseNothing(t *testing.T) {
	t.Run("one per request", func(t *testing.T) { testKafkaKillsAndRestart(t) })
	t.Run("batch 100", func(t *testing.T) { testKafkaKillsAndRestart(t, "--batch-max-events", "100", "--batch-linger", "2ms") })
}

func testKafkaKillsAndRestart(t *testing.T, extra ...string) {
	e := newEnv(t)
	const topic = "outbox.event.order"
	kc := kafkatest.Start(t, 3, 8, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := append([]string{"--kafka-brokers", kc.Brokers()}, extra...)
	cmd := e.brokerProcess(args...)
	waitFor(t, 60*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := e.sampleConfirmed(sampleCtx, kafkaEnd(t, kc.Brokers(), topic))
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(ctx, e.pool,
			relaytest.Workload{Events: 10000, Aggregates: 100, MaxTxSize: 10, Rollback: 0.05, Writers: 4})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	for step := 0; step < 4; step++ {
		time.Sleep(time.Duration(400+rand.IntN(600)) * time.Millisecond)
		if step == 2 {
			// The cluster goes down with produce requests in flight and comes back from its data.
			kc.Close()
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			kc.Restart()
			continue
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cmd = e.brokerProcess(args...)
	}
	res := <-produced
	var msgs []brokerMsg
	waitFor(t, 5*time.Minute, "every event in the topic", func() bool {
		msgs = kafkaMsgs(t, ctx, kc.Brokers(), topic)
		return relaytest.Check(res, toDeliveries(msgs)).Delivered == len(res.Committed)
	})
	var maxLSN int64
	for _, m := range msgs {
		maxLSN = max(maxLSN, m.CommitLSN)
	}
	waitFor(t, 2*time.Minute, "slot confirmed past the last event", func() bool {
		c, _ := e.slotLSNs()
		return c > maxLSN
	})
	time.Sleep(200 * time.Millisecond)
	stopSampling()
	rep := checkBroker(t, res, kafkaMsgs(t, ctx, kc.Brokers(), topic), samples())
	t.Logf("duplicates %d of %d events", rep.Duplicates, rep.Committed)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
	}
}
