package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 1 << 20

// ProcessFunc applies one verified, first-seen event. It runs inside the transaction that
// records the event in inbox_events: write the event's effects through tx and they commit
// together with the record, exactly once. Returning an error (or panicking) rolls both back and
// answers 500, so the relay retries. It must not commit or roll back tx, and should not take a
// second connection from the same pool, which could wait forever on a full pool.
type ProcessFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// Config tunes a Handler. The zero value is ready to use.
type Config struct {
	// MaxBodyBytes is the largest body accepted; larger ones get 413. If zero, the default is
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Tolerance is how far a signature's timestamp may be from now, either way. If zero, the
	// default is DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// Logger receives one line per refused or failed delivery (Warn for 4xx, Error for 5xx,
	// with the panic's stack for a panic) and one Debug line per accepted one. If zero, nothing
	// is logged.
	Logger zerolog.Logger
	// Now is the clock that signatures are checked against. If nil, the default is time.Now.
	Now func() time.Time
}

// Handler is the http.Handler a consumer mounts at its webhook URL: it verifies each delivery,
// records it in inbox_events and runs the ProcessFunc once per event id. It is safe for
// concurrent use.
type Handler struct {
	pool     *pgxpool.Pool
	process  ProcessFunc
	verifier *Verifier
	maxBody  int64
	log      zerolog.Logger
	now      func() time.Time
	stats    counters
}

// New returns a Handler that stores events through pool, accepts signatures made with any of
// secrets (see NewVerifier for how they are read), and applies first-seen events with process.
// The inbox_events table must exist (`outbox-relay migrate`).
func New(pool *pgxpool.Pool, secrets []string, process ProcessFunc, cfg Config) (*Handler, error) {
	if pool == nil || process == nil {
		return nil, errors.New("inbox: New needs a pool and a process func")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("inbox: negative MaxBodyBytes %d", cfg.MaxBodyBytes)
	}
	v, err := NewVerifier(secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	h := &Handler{pool: pool, process: process, verifier: v, maxBody: cfg.MaxBodyBytes,
		log: cfg.Logger, now: cfg.Now}
	if h.maxBody == 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// ServeHTTP runs the checks in the order the package doc gives and answers with the status
// code of the first that fails.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	ev, sig, err := h.accept(w, r)
	if err != nil {
		h.stats.rejected.Add(1)
		h.refuse(w, r, err)
		return
	}
	duplicate, err := h.deliver(r.Context(), ev, sig)
	if err != nil {
		h.fail(w, ev, err)
		return
	}
	h.succeed(w, ev, duplicate)
}

// accept reads, verifies and parses a request: everything before the database.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request) (Event, string, error) {
	body, err := readBody(w, r, h.maxBody)
	if err != nil {
		return Event{}, "", err
	}
	if err := h.verifier.Verify(r.Header, body, h.now()); err != nil {
		return Event{}, "", err
	}
	ev, err := ParseEvent(r.Header, body)
	return ev, signatureHeader(r.Header), err
}

// readBody reads at most limit bytes, refusing a larger body with ErrBodyTooLarge.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: Content-Length %d over the limit of %d bytes", ErrBodyTooLarge, r.ContentLength, limit)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, fmt.Errorf("%w: over the limit of %d bytes", ErrBodyTooLarge, limit)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: read body: %w", ErrMalformed, err)
	}
	return buf.Bytes(), nil
}

// signatureHeader returns the header value that was verified, for the inbox_events.signature
// column.
func signatureHeader(h http.Header) string {
	if v := h.Get(headerWebhookSig); v != "" {
		return v
	}
	return h.Get(headerXSignature)
}
