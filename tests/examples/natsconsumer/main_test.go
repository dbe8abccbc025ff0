package main

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/natstest"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// The same event stored twice in the stream is applied once; a different event is applied too;
// a message that is not a relay event is terminated, not redelivered forever.
func TestDuplicateAppliedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDB(t)) // a consumer's database: nothing of the relay
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, inbox.Config{}); err != nil {
		t.Fatal(err)
	}
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
	// stream's duplicate window. The last message is not a relay event.
	for _, id := range []string{a, a, b, ""} {
		m := &nats.Msg{Subject: "outbox.order.order_created", Data: []byte(`{"n":1}`), Header: nats.Header{}}
		if id != "" {
			m.Header.Set("X-Event-Id", id)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	p, err := inbox.NewProcessor(pool, func(_ context.Context, _ pgx.Tx, ev inbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen[ev.ID.String()]++
		return nil
	}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Consume(cctx, js, p, "OUTBOX", "test") }()
	// Wait until the consumer answered all four messages (acknowledged or terminated).
	for {
		c, err := js.Consumer(ctx, "OUTBOX", "test")
		if err == nil {
			if info, err := c.Info(ctx); err == nil && info.AckFloor.Stream == 4 {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the consumer did not answer the four messages")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[a] != 1 || seen[b] != 1 {
		t.Fatalf("applied %v, want each of the two events once", seen)
	}
	if s := p.Stats(); s.Processed != 2 || s.Duplicates != 1 || s.Rejected != 1 {
		t.Fatalf("stats %+v, want 2 processed, 1 duplicate, 1 rejected", s)
	}
}
