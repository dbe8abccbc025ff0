package relay

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/tests/internal/natstest"
)

// natsEnd returns the end offsets of a NATS stream for sampleConfirmed: partition 0, the last
// stream sequence + 1.
func natsEnd(t *testing.T, url, stream string) func(context.Context) (map[int]int64, bool) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) (map[int]int64, bool) {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, false
		}
		return map[int]int64{0: int64(info.State.LastSeq) + 1}, true
	}
}

// tryNATSMsgs is natsMsgs for a waitFor: false, rather than a wait beyond the waitFor's own
// limit, while the stream cannot be read (a cluster electing a leader). r keeps what earlier
// attempts read, so that the attempts finish however slowly the cluster answers.
func tryNATSMsgs(t *testing.T, ctx context.Context, r *natstest.Reader) ([]brokerMsg, bool) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msgs, err := r.Read(ctx)
	if err != nil {
		t.Logf("read stream %s: %v (retrying)", r.Stream, err)
		return nil, false
	}
	var out []brokerMsg
	for _, m := range msgs {
		out = append(out, newBrokerMsg(t, 0, int64(m.Seq), m.Header.Get, m.Data))
	}
	return out, true
}

func natsMsgs(t *testing.T, ctx context.Context, url, stream string) []brokerMsg {
	var out []brokerMsg
	for _, m := range natstest.ReadStream(ctx, t, url, stream) {
		out = append(out, newBrokerMsg(t, 0, int64(m.Seq), m.Header.Get, m.Data))
	}
	return out
}

// 10k events over 100 aggregates to NATS JetStream (file storage) with the relay binary
// SIGKILLed three times and the NATS server restarted once mid-stream: every event in the
// stream, first appearances in commit order per aggregate, and the slot never confirmed past
// an event the stream did not hold.
//
// Batched (several messages published at once, each acknowledged on its own), the same must
// hold.
func TestNATSSIGKILLAndServerRestartLoseNothing(t *testing.T) {
	t.Run("one per request", func(t *testing.T) { testNATSKillsAndRestart(t) })
	t.Run("batch 100", func(t *testing.T) { testNATSKillsAndRestart(t, "--batch-max-events", "100", "--batch-linger", "2ms") })
}

func testNATSKillsAndRestart(t *testing.T, extra ...string) {
	e := newEnv(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e.brokerKillRun(ctx, natsSink(t, srv.URL(), extra...), killsAndABrokerRestart(srv.Shutdown, srv.Restart), nil)
}

// natsSink is the stream OUTBOX at url, which the relay creates.
func natsSink(t *testing.T, url string, extra ...string) brokerSink {
	r := &natstest.Reader{URL: url, Stream: "OUTBOX"}
	return brokerSink{
		args: append([]string{"--nats-url", url, "--nats-create-stream", "OUTBOX"}, extra...),
		end:  natsEnd(t, url, "OUTBOX"),
		read: func(ctx context.Context) ([]brokerMsg, bool) { return tryNATSMsgs(t, ctx, r) },
	}
}

func toDeliveries(msgs []brokerMsg) []relaytest.Delivery {
	out := make([]relaytest.Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = relaytest.Delivery{ID: m.ID, Aggregate: m.Aggregate, Seq: m.Seq}
	}
	return out
}

// A three-node JetStream cluster with a stream of three replicas: the node leading the stream is
// killed mid-stream (and the relay SIGKILLed once): every event still in the stream, first
// appearances in commit order, the slot never confirmed past an event the stream lacked.
func TestNATSClusterNodeKillLosesNothing(t *testing.T) {
	e := newEnv(t)
	cl := natstest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sink := natsSink(t, cl.URL(), "--nats-stream-replicas", "3")
	var leader *natstest.Server
	e.brokerKillRun(ctx, sink, func(kill func()) {
		waitFor(t, 60*time.Second, "stream leader elected", func() bool { return cl.StreamLeader("OUTBOX") != nil })
		// Kill the stream's leader once it has stored some of the events, with publishes in
		// flight, then SIGKILL the relay once.
		waitFor(t, 2*time.Minute, "stream holds 2000 messages", func() bool {
			offs, ok := sink.end(ctx)
			return ok && offs[0] > 2000
		})
		if leader = cl.StreamLeader("OUTBOX"); leader == nil {
			t.Fatal("no stream leader to kill")
		}
		leader.Shutdown()
		t.Logf("killed the stream leader")
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		kill()
	}, func() {
		// The lost node comes back once every event is committed (until then the relay
		// publishes to the two nodes left); it catches up from them, and the final reads see a
		// whole cluster.
		leader.Restart()
		t.Logf("restarted the killed node")
	})
}

// A poison message in a batch to NATS: JetStream refuses one event (bigger than the stream's
// max_msg_size) while it stores the rest of its batch. Only that event is dead-lettered and only
// its aggregate parked, and none of that aggregate's later events ever reaches the stream (with
// several events of an aggregate in one batch, they would: JetStream acknowledges each message
// on its own). Every other event is in the stream.
func TestNATSPoisonInBatchParksOnlyItsAggregate(t *testing.T) {
	e := newEnv(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"},
		MaxMsgSize: 400, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The backlog, in one transaction before the relay starts, so that batches are full: 20
	// aggregates of 10 events; order/7's fourth event (seq 3) is too big for the stream.
	const aggs, per, poisonSeq = 20, 10, 3
	if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', a::text, 'order.created',
		       jsonb_build_object('seq', s, 'pad', CASE WHEN a = 7 AND s = $3 THEN repeat('x', 1000) ELSE '' END)
		FROM generate_series(0, $2 - 1) s, generate_series(0, $1 - 1) a ORDER BY s, a`, aggs, per, poisonSeq); err != nil {
		t.Fatal(err)
	}
	cmd := e.brokerProcess("--nats-url", srv.URL(), "--batch-max-events", "50", "--batch-linger", "2ms",
		"--max-attempts", "3")
	waitFor(t, time.Minute, "the poison event failed and the rest of its aggregate parked", func() bool {
		c := e.statusCounts(poisonAgg)
		return c["failed"] == 1 && c["parked"] == per-poisonSeq-1
	})
	waitFor(t, time.Minute, "every other event in the stream", func() bool {
		n := 0
		for _, m := range natsMsgs(t, ctx, srv.URL(), "OUTBOX") {
			if m.Aggregate != poisonAgg {
				n++
			}
		}
		return n >= (aggs-1)*per
	})
	seen := map[string]bool{}
	var poisonSeen []int
	for _, m := range natsMsgs(t, ctx, srv.URL(), "OUTBOX") {
		if m.Aggregate == poisonAgg {
			poisonSeen = append(poisonSeen, m.Seq)
		}
		seen[m.ID] = true
	}
	if len(seen) != (aggs-1)*per+poisonSeq {
		t.Errorf("%d distinct events in the stream, want %d", len(seen), (aggs-1)*per+poisonSeq)
	}
	for i, s := range poisonSeen {
		if s != i {
			t.Fatalf("the poisoned aggregate's events in the stream: %v, want 0..%d (nothing past the dead letter)", poisonSeen, poisonSeq-1)
		}
	}
	if len(poisonSeen) != poisonSeq {
		t.Fatalf("the poisoned aggregate's events in the stream: %v, want 0..%d", poisonSeen, poisonSeq-1)
	}
	var lastErr string
	if err := e.pool.QueryRow(ctx, `SELECT last_error FROM outbox_events WHERE status = 'failed'`).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	t.Logf("dead letter: %s", lastErr)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
	}
}
