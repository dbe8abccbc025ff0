package main

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/natstest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// The same event stored twice in the stream is applied once; a different event is applied too.
func TestDuplicateAppliedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, pool := relaytest.MigratedDB(t)
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}}); err != nil {
		t.Fatal(err)
	}
	a, b := uuid.NewString(), uuid.NewString()
	// Without Nats-Msg-Id both copies of a are stored, as after a relay crash outside the
	// stream's duplicate window.
	for _, id := range []string{a, a, b} {
		m := &nats.Msg{Subject: "outbox.order.order_created", Data: []byte(`{"n":1}`), Header: nats.Header{}}
		m.Header.Set("X-Event-Id", id)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var applied atomic.Int32
	seen := map[string]int{}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Consume(cctx, js, pool, "OUTBOX", "test", func(_ context.Context, _ pgx.Tx, ev Event) error {
			seen[ev.ID]++
			applied.Add(1)
			return nil
		})
	}()
	// Wait until the consumer acknowledged all three messages.
	for {
		c, err := js.Consumer(ctx, "OUTBOX", "test")
		if err == nil {
			if info, err := c.Info(ctx); err == nil && info.AckFloor.Stream == 3 {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the consumer did not acknowledge the three messages")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if applied.Load() != 2 || seen[a] != 1 || seen[b] != 1 {
		t.Fatalf("applied %d times (%v), want each of the two events once", applied.Load(), seen)
	}
}
