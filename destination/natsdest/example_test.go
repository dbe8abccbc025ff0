package natsdest_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Publish to NATS JetStream instead of a webhook: the relay's Config takes the destination,
// and the slot is confirmed only after JetStream acknowledged each event. The same as
// `outbox-relay run --nats-url nats://nats:4222 --nats-create-stream OUTBOX`.
func ExampleConfig() {
	cfg := relay.Config{
		DSN: os.Getenv("DB_DSN"),
		Destination: natsdest.Config{
			URL:          "nats://nats:4222",
			Subject:      "outbox.{aggregate_type}.{event_type}", // one subject per aggregate type and event type
			CreateStream: &natsdest.StreamConfig{Name: "OUTBOX", Replicas: 3},
		},
	}
	if err := relay.Run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

// Validate checks a configuration without connecting, and its error names the fix.
func ExampleConfig_Validate() {
	err := natsdest.Config{Subject: "outbox.{aggregate_type}"}.Validate()
	fmt.Println(err)
	// Output: nats: no server URL: set nats.url (or --nats-url), e.g. nats://127.0.0.1:4222
}

// New connects and checks that a stream captures the subjects; a program with its own
// publisher wiring uses the Destination directly.
func ExampleNew() {
	dest, err := natsdest.New(context.Background(), natsdest.Config{URL: "nats://127.0.0.1:4222"}, slog.Default())
	if err != nil {
		log.Fatal(err) // e.g. no stream captures outbox.event.* (names the flag that creates one)
	}
	defer dest.Close()
}
