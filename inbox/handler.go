package inbox

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 1 << 20

// Config tunes a Handler or a Processor. The zero value is ready to use.
type Config struct {
	// Schema is the schema of inbox_events (and Migrate's, of its history table). If empty,
	// the names are left unqualified, so the connection's search_path finds them: the table in
	// current_schema(), where Migrate creates it.
	Schema string
	// Retention, if positive, prunes in the background: at start and then every
	// DefaultPruneEvery, a goroutine deletes the inbox_events rows received longer ago than
	// this (see Prune); Close stops it. A pruned event that is delivered again is applied
	// again, so keep it longer than the sender may send an event again: see RetryHorizon. If
	// zero, the default, nothing is ever deleted, which is the only setting under which no
	// delivery, however late, is applied twice.
	Retention time.Duration
	// RetryHorizon is how long after a first delivery the sender may still deliver the same
	// event again; Retention must not be shorter. If zero, the default is DefaultRetryHorizon
	// (48 hours), the relay's retries with its default settings and a margin. See
	// PruneOptions.RetryHorizon.
	RetryHorizon time.Duration
	// Logger receives, from a Handler, one line per refused or failed delivery (Warn for 4xx,
	// Error for 5xx, with the panic's stack for a panic) and one Debug line per accepted one
	// (a Processor logs no message: Process returns the error); from both, a line per
	// background prune that deleted something or failed. If zero, nothing is logged.
	Logger zerolog.Logger

	// The fields below tune the HTTP Handler only.

	// MaxBodyBytes is the largest body accepted; larger ones get 413. If zero, the default is
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Tolerance is how far a signature's timestamp may be from now, either way. If zero, the
	// default is DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// Now is the clock that signatures are checked against. If nil, the default is time.Now.
	Now func() time.Time
	// AllowedNetworks restricts senders to these networks: CIDRs ("10.0.0.0/8",
	// "2001:db8::/32") or single addresses. A request from anywhere else gets 403 before its
	// body is read. If empty, every sender may try (the signature still decides).
	AllowedNetworks []string
	// TrustedProxies are the networks of reverse proxies in front of the inbox (same syntax).
	// Only when the direct peer is one of them is X-Forwarded-For read: from the right,
	// skipping trusted proxies, the first untrusted address is the client that
	// AllowedNetworks judges. If empty, X-Forwarded-For is ignored and the direct peer is the
	// client. Setting it without AllowedNetworks is an error.
	TrustedProxies []string
}

// Handler is the http.Handler a consumer mounts at its webhook URL: it verifies each delivery,
// records it in inbox_events and runs the ProcessFunc once per event id. It is safe for
// concurrent use.
type Handler struct {
	p        *Processor // not embedded: its Process verifies no signature
	verifier *Verifier
	maxBody  int64
	now      func() time.Time
	allow    *allowlist // nil: no allowlist
}

// New returns a Handler that stores events through db (a *pgxpool.Pool, usually), accepts
// signatures made with any of secrets (see NewVerifier for how they are read), and applies
// first-seen events with process. The inbox_events table must exist (Migrate, or
// `outbox-relay migrate`). With cfg.Retention set, call Close when done.
func New(db DB, secrets []string, process ProcessFunc, cfg Config) (*Handler, error) {
	if nilDB(db) || process == nil {
		return nil, errors.New("inbox: New needs a database and a process func")
	}
	return newHandler(pgxStore{db: db, fn: process}, secrets, cfg)
}

// NewSQL is New for database/sql (lib/pq, pgx's stdlib, any PostgreSQL driver): process gets
// the inbox's transaction as a *sql.Tx.
func NewSQL(db SQLDB, secrets []string, process SQLProcessFunc, cfg Config) (*Handler, error) {
	if nilDB(db) || process == nil {
		return nil, errors.New("inbox: NewSQL needs a database and a process func")
	}
	return newHandler(sqlStore{db: db, fn: process}, secrets, cfg)
}

func newHandler(s store, secrets []string, cfg Config) (*Handler, error) {
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("inbox: negative MaxBodyBytes %d", cfg.MaxBodyBytes)
	}
	v, err := NewVerifier(secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	allow, err := newAllowlist(cfg.AllowedNetworks, cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	p, err := newProcessor(s, cfg)
	if err != nil {
		return nil, err
	}
	h := &Handler{p: p, verifier: v, maxBody: cfg.MaxBodyBytes, now: cfg.Now, allow: allow}
	if h.maxBody == 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// Close stops the background pruning of Config.Retention, if any, and waits for it: see
// Processor.Close. The Handler keeps serving after Close.
func (h *Handler) Close() error { return h.p.Close() }

// ServeHTTP runs the checks in the order the package doc gives and answers with the status
// code of the first that fails.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.allow != nil {
		if err := h.allow.check(r); err != nil {
			h.p.stats.rejected.Add(1)
			h.refuse(w, r, err)
			return
		}
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	evs, f, sig, err := h.accept(w, r)
	if err != nil {
		h.p.stats.rejected.Add(1)
		h.refuse(w, r, err)
		return
	}
	if f != FormatBatch {
		ev := evs[0]
		duplicate, err := h.p.deliver(r.Context(), ev, sig)
		if err != nil {
			h.fail(w, err, ev.ID.String(), ev.Type, ev.Attempt, 1)
			return
		}
		h.succeed(w, ev, duplicate)
		return
	}
	processed, err := h.p.deliverBatch(r.Context(), evs, sig)
	if err != nil {
		h.fail(w, err, evs[0].ID.String(), evs[0].Type, evs[0].Attempt, len(evs))
		return
	}
	h.succeedBatch(w, evs, processed)
}

// accept reads, verifies and parses a request: everything before the database.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request) ([]Event, Format, string, error) {
	body, err := readBody(w, r, h.maxBody)
	if err != nil {
		return nil, 0, "", err
	}
	body, err = h.verifyEncoded(r.Header, body)
	if err != nil {
		return nil, 0, "", err
	}
	evs, f, err := ParseEvents(r.Header, body)
	return evs, f, signatureHeader(r.Header), err
}

// verifyEncoded undoes a gzip Content-Encoding and verifies the signature, returning the body
// to parse. The signature may cover the body as sent (checked first, before anything is
// decompressed) or the decompressed body: both prove the content came from the relay. The
// decompressed body is bounded by the same limit as the body.
func (h *Handler) verifyEncoded(hd http.Header, body []byte) ([]byte, error) {
	enc, err := contentEncoding(hd)
	if err != nil {
		return nil, err
	}
	if enc == "" {
		return body, h.verifier.Verify(hd, body, h.now())
	}
	wireErr := h.verifier.Verify(hd, body, h.now())
	plain, err := gunzip(body, h.maxBody)
	if err != nil {
		if wireErr != nil && !errors.Is(err, ErrBodyTooLarge) {
			return nil, wireErr // not proven to come from the relay: say so, not why it won't unzip
		}
		return nil, err
	}
	if wireErr == nil {
		return plain, nil
	}
	if err := h.verifier.Verify(hd, plain, h.now()); err != nil {
		return nil, wireErr
	}
	return plain, nil
}

// contentEncoding returns "gzip" or "" (none, or identity), or ErrUnsupported.
func contentEncoding(h http.Header) (string, error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return "", nil
	case len(codings) == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip"):
		return "gzip", nil
	}
	return "", fmt.Errorf("%w: Content-Encoding %q; the inbox reads gzip or none", ErrUnsupported, clip(strings.Join(codings, ", ")))
}

// gunzip decompresses body, refusing more than limit bytes of output with ErrBodyTooLarge,
// so a small body cannot expand without bound.
func gunzip(body []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: Content-Encoding gzip, but the body is not gzip: %w", ErrMalformed, err)
	}
	defer zr.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: Content-Encoding gzip, but the body does not decompress: %w", ErrMalformed, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: decompressed body over the limit of %d bytes", ErrBodyTooLarge, limit)
	}
	return buf.Bytes(), nil
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
