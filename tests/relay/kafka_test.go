package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/tests/internal/kafkatest"
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
	e.brokerKillRun(ctx, brokerSink{
		args: append([]string{"--kafka-brokers", kc.Brokers()}, extra...),
		end:  kafkaEnd(t, kc.Brokers(), topic),
		read: func(ctx context.Context) ([]brokerMsg, bool) { return kafkaMsgs(t, ctx, kc.Brokers(), topic), true },
	}, killsAndABrokerRestart(kc.Close, kc.Restart), nil)
}
