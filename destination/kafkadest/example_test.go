package kafkadest_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Produce to Kafka instead of a webhook, in the layout of Debezium's outbox event router (topic
// per aggregate type, key = aggregate id, header id = event id), so its consumers work
// unchanged. The slot is confirmed only after acks=all. The same as
// `outbox-relay run --kafka-brokers k1:9092,k2:9092`.
func ExampleConfig() {
	cfg := relay.Config{
		DSN: os.Getenv("DB_DSN"),
		Destination: kafkadest.Config{
			Brokers:     "k1:9092,k2:9092",
			Topic:       "outbox.event.{aggregate_type}", // the default
			Compression: "zstd",
		},
	}
	if err := relay.Run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

// Validate checks a configuration without connecting, and its error names the fix.
func ExampleConfig_Validate() {
	err := kafkadest.Config{Brokers: "k1:9092", Compression: "brotli"}.Validate()
	fmt.Println(err)
	// Output: kafka: compression "brotli": use none, gzip, snappy, lz4 or zstd
}
