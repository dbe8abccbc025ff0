package demo

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// consumerShutdown is how long the consumer gets to finish deliveries in flight at the end.
const consumerShutdown = 10 * time.Second

// startConsumer serves the demo's warehouse on a free loopback port, behind loseAcks.
func (d *demo) startConsumer(ctx context.Context) error {
	srv, err := newWarehouse(ctx, d.pool, []string{d.secret})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	d.consumer, d.consumerAddr = srv, ln.Addr().String()
	d.lose = &loseAcks{next: srv, every: int64(d.cfg.LoseEvery)}
	d.consumerRun = d.spawn(ctx, "stop the consumer", func(ctx context.Context) error { return serve(ctx, ln, d.lose) })
	return nil
}

// serve answers on ln until ctx is done, then shuts down, letting requests in flight finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("consumer: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), consumerShutdown)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}

func (d *demo) consumerURL() string {
	return "http://" + d.consumerAddr + "/webhook"
}

// loseAcks passes requests to the consumer and, for every nth delivery the consumer accepted
// and committed, answers 502 instead of its 200: the answer is "lost" on the way back, as when
// a proxy or the network fails after the commit. The relay then delivers the event again and
// the inbox absorbs the duplicate. Answers to duplicates themselves always get through.
type loseAcks struct {
	next     http.Handler
	every    int64 // 0: lose nothing
	accepted atomic.Int64
	lost     atomic.Int64
}

func (l *loseAcks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l.every <= 0 || r.URL.Path != "/webhook" {
		l.next.ServeHTTP(w, r)
		return
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	l.next.ServeHTTP(rec, r)
	if rec.code == http.StatusOK && rec.header.Get(inbox.HeaderDuplicate) == "" && l.accepted.Add(1)%l.every == 0 {
		l.lost.Add(1)
		http.Error(w, "demo: the consumer committed, but this answer was lost on the way", http.StatusBadGateway)
		return
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body.Bytes())
}

// recorder holds a response until loseAcks decides whether it gets through.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
