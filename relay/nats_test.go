package relay

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/natstest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
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
func TestNATSSIGKILLAndServerRestartLoseNothing(t *testing.T) {
	e := newEnv(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"--nats-url", srv.URL(), "--nats-create-stream", "OUTBOX"}
	cmd := e.brokerProcess(args...)
	waitFor(t, 60*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := e.sampleConfirmed(sampleCtx, natsEnd(t, srv.URL(), "OUTBOX"))
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
			// The broker crashes with publishes in flight and comes back on the same store.
			srv.Shutdown()
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			srv.Restart()
			continue
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cmd = e.brokerProcess(args...)
	}
	res := <-produced
	// Wait until the stream holds every committed event, then until the slot confirmed all of
	// it (so the last samples cover every event).
	var msgs []brokerMsg
	waitFor(t, 5*time.Minute, "every event in the stream", func() bool {
		msgs = natsMsgs(t, ctx, srv.URL(), "OUTBOX")
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
	time.Sleep(200 * time.Millisecond) // one more sample after the final confirmation
	stopSampling()
	rep := checkBroker(t, res, natsMsgs(t, ctx, srv.URL(), "OUTBOX"), samples())
	t.Logf("duplicates %d of %d events", rep.Duplicates, rep.Committed)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
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
	args := []string{"--nats-url", cl.URL(), "--nats-create-stream", "OUTBOX", "--nats-stream-replicas", "3"}
	cmd := e.brokerProcess(args...)
	waitFor(t, 60*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
	waitFor(t, 60*time.Second, "stream leader elected", func() bool { return cl.StreamLeader("OUTBOX") != nil })
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := e.sampleConfirmed(sampleCtx, natsEnd(t, cl.URL(), "OUTBOX"))
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(ctx, e.pool,
			relaytest.Workload{Events: 10000, Aggregates: 100, MaxTxSize: 10, Rollback: 0.05, Writers: 4})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	// Kill the stream's leader once it has stored some of the events, with publishes in flight.
	end := natsEnd(t, cl.URL(), "OUTBOX")
	waitFor(t, 2*time.Minute, "stream holds 2000 messages", func() bool {
		offs, ok := end(ctx)
		return ok && offs[0] > 2000
	})
	leader := cl.StreamLeader("OUTBOX")
	if leader == nil {
		t.Fatal("no stream leader to kill")
	}
	leader.Shutdown()
	t.Logf("killed the stream leader")
	time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd = e.brokerProcess(args...)
	res := <-produced
	var msgs []brokerMsg
	waitFor(t, 5*time.Minute, "every event in the stream", func() bool {
		msgs = natsMsgs(t, ctx, cl.URL(), "OUTBOX")
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
	rep := checkBroker(t, res, natsMsgs(t, ctx, cl.URL(), "OUTBOX"), samples())
	t.Logf("duplicates %d of %d events", rep.Duplicates, rep.Committed)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want 0", err)
	}
}
