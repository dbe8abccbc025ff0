package warehouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// ShutdownTimeout is how long Serve waits for deliveries in flight once its context is done.
const ShutdownTimeout = 10 * time.Second

// Server is the consumer's HTTP side: the inbox at /webhook, liveness at /healthz, readiness
// (database reachable, inbox_events present) at /readyz.
type Server struct {
	*Warehouse
	inbox *inbox.Handler
	pool  *pgxpool.Pool
	mux   *http.ServeMux
}

// New runs Setup, then returns a Server whose inbox accepts signatures made with any of
// secrets (see inbox.NewVerifier) and is tuned by cfg (with cfg.Retention, call Close).
func New(ctx context.Context, pool *pgxpool.Pool, secrets []string, cfg inbox.Config) (*Server, error) {
	if err := Setup(ctx, pool, cfg); err != nil {
		return nil, err
	}
	s := &Server{Warehouse: &Warehouse{}, pool: pool, mux: http.NewServeMux()}
	in, err := inbox.New(pool, secrets, s.Reserve, cfg)
	if err != nil {
		return nil, err
	}
	s.inbox = in
	s.mux.Handle("/webhook", in)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	return s, nil
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Stats returns the inbox's counts, among them the duplicates it absorbed.
func (s *Server) Stats() inbox.Stats { return s.inbox.Stats() }

// Close stops the inbox's background pruning (Config.Retention) and waits for it.
func (s *Server) Close() error { return s.inbox.Close() }

// Serve answers requests on ln until ctx is done, then shuts down, giving deliveries in flight
// up to ShutdownTimeout. It closes ln, and returns nil after a shutdown on ctx.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// ready answers 200 when the database is reachable and migrated, else 503 with the reason.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := checkInbox(ctx, s.pool); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}
