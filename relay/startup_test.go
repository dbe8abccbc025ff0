package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A stop requested at any point of start-up is a clean stop: Run returns nil, however far the
// set-up got (here: before the first connection, when every lookup fails with the cancel). A
// SIGTERM during start-up used to exit 1 with "look up slot: context canceled".
func TestStopDuringStartupIsClean(t *testing.T) {
	t.Parallel()
	dsn, _ := relaytest.MigratedDB(t)
	recv := relaytest.NewReceiver("secret")
	t.Cleanup(recv.Close)
	cfg := Config{DSN: dsn, WebhookURL: recv.URL, Secrets: []string{"secret"}, Slot: "startup", Publication: "startup",
		RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t))}

	// Positive control: the same configuration starts and streams, and a stop then is clean.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Minute)
	for {
		var active bool
		_ = conn.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = 'startup'`).Scan(&active)
		if active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never streamed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stop while streaming: %v", err)
	}

	// Stopped before start-up began, and stopped just after it began: both clean.
	for _, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		if after == 0 {
			cancel()
		} else {
			time.AfterFunc(after, cancel)
		}
		if err := Run(ctx, cfg); err != nil {
			t.Errorf("stopped %v into start-up: %v", after, err)
		}
		cancel()
	}
}
