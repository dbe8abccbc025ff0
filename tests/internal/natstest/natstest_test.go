package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A read of a stream returns by its context, with an error, when JetStream refuses it (here:
// the stream allows no more consumers), and reads whole otherwise.
func TestReadStreamReturnsByItsContext(t *testing.T) {
	srv := Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{{Name: "S", Subjects: []string{"s.>"}, MaxConsumers: 1},
		{Name: "T", Subjects: []string{"t.>"}}} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1200; i++ {
		for _, subj := range []string{"s.x", "t.x"} {
			if _, err := js.Publish(ctx, subj, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// S's one consumer is taken.
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	// Positive control: T, which allows consumers, reads whole.
	msgs, err := TryReadStream(ctx, srv.URL(), "T")
	if err != nil || len(msgs) != 1200 {
		t.Fatalf("read %d messages of T (%v), want 1200", len(msgs), err)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := TryReadStream(rctx, srv.URL(), "S")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a stream that allows no more consumers without error")
		}
		t.Logf("read of S refused in time: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("TryReadStream with a 3s context still running after 30s")
	}
}

// A read creates one consumer and leaves none behind. Reading through an ordered consumer
// created a consumer per 500 messages and left the last for five minutes (this test saw 1 left
// after one read of 1,200 messages, and 4 created); in the cluster test, reads
// repeated while the cluster re-elected its leaders piled up consumer creations on the
// recovering meta leader, and an ordered consumer retries a failed creation forever.
func TestReadStreamLeavesNoConsumerBehind(t *testing.T) {
	srv := Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1200; i++ {
		if _, err := js.Publish(ctx, "s.x", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	created := 0
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.S.>", func(*nats.Msg) { created++ })
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := TryReadStream(ctx, srv.URL(), "S")
	if err != nil || len(msgs) != 1200 {
		t.Fatalf("read %d messages (%v), want 1200", len(msgs), err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = sub.Unsubscribe()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 || created > 1 {
		t.Fatalf("after one read: %d consumers left, %d created; want 0 left, 1 created", info.State.Consumers, created)
	}
}

// A cluster's ports are below the kernel's ephemeral range, so that a stopped node's ports
// cannot be taken by another process meanwhile; FreePort's (bind to port 0) are inside it.
func TestClusterPortsAreBelowTheEphemeralRange(t *testing.T) {
	cl := StartCluster(t, 3)
	lo := ephemeralLow()
	for _, s := range cl {
		for _, p := range []int{s.opts.Port, s.opts.Cluster.Port} {
			if p >= lo {
				t.Errorf("node %s uses port %d, inside the ephemeral range from %d", s.opts.ServerName, p, lo)
			}
		}
	}
	if p := FreePort(t); p < lo {
		t.Logf("control: FreePort gave %d, below %d (the range is configured otherwise)", p, lo)
	}
}
