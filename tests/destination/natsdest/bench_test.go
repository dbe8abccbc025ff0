package natsdest_test

import (
	"context"
	"fmt"
	"testing"

	"log/slog"

	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/tests/internal/natstest"
)

// BenchmarkSendBatch publishes batches of 100 events (100 aggregates) to an in-process
// nats-server and waits for their PubAcks: the destination's own cost per event, the broker's
// included (go test -bench SendBatch -cpuprofile).
func BenchmarkSendBatch(b *testing.B) {
	ctx := context.Background()
	srv := natstest.Start(b)
	d, err := natsdest.New(ctx, natsdest.Config{URL: srv.URL(), CreateStream: &natsdest.StreamConfig{Name: "OUTBOX"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		evs := make([]*envelope.Message, 100)
		for j := range evs {
			evs[j] = event(fmt.Sprintf("agg-%03d", j), i)
		}
		b.StartTimer()
		if r := d.SendBatch(ctx, evs, 1); !r.Delivered {
			b.Fatal(r.Err)
		}
	}
}
