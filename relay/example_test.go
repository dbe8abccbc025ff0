package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/relay"
)

// search is a program's own destination: it indexes each event. The relay decides order,
// retries, dead letters and confirmation; Send only makes one attempt.
type search struct {
	index func(ctx context.Context, id string, doc []byte) error
}

func (s search) Send(ctx context.Context, m *envelope.Message, _ int) destination.Result {
	if err := s.index(ctx, m.AggregateType+"/"+m.AggregateID, m.Payload); err != nil {
		return destination.Result{Err: err, Label: destination.ResultNetwork}
	}
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// A program embeds the relay: its own destination on one pipeline (marks, control, backfill,
// stall detection and retention as with the webhook), its series on the program's registry, and
// /metrics, /healthz and /readyz on the program's own mux.
func Example_embed() {
	reg := prometheus.NewRegistry()
	dest := search{index: func(ctx context.Context, id string, doc []byte) error {
		fmt.Println("index", id, string(doc))
		return nil
	}}
	r, err := relay.New(relay.Config{
		DSN:        os.Getenv("DB_DSN"),
		Registerer: reg,
		Pipelines: []relay.Pipeline{{
			Name:        "search",
			Filter:      "aggregate_type = 'product'",
			Destination: destination.Opened(dest),
		}},
	})
	if err != nil {
		log.Fatal(err) // a bad setting, named with its fix; nothing has started
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", r.Handler())) // /outbox/readyz, /outbox/metrics
	srv := &http.Server{Addr: ":8080", Handler: mux}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var g errgroup.Group
	g.Go(func() error { return r.Run(ctx) }) // drains and returns nil once ctx ends
	g.Go(func() error {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		return srv.Shutdown(context.Background())
	})
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
}
