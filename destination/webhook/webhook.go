// Package webhook is the destination.Destination for an HTTP endpoint: one signed POST per
// attempt (or per batch), in the webhook contract's raw format or as CloudEvents.
//
// # Requests
//
// A raw request carries the payload as its body and the contract's headers: the event's
// (envelope.EventHeaders), X-Attempt, the signature of the scheme configured (X-Signature and
// X-Timestamp, or Standard Webhooks' webhook-id, webhook-timestamp and webhook-signature, one
// signature per secret during a rotation), and the row's forwarded traceparent, tracestate and
// X-* headers. FormatCloudEvents sends one event in CloudEvents binary mode; a batch is always
// CloudEvents batch mode. CompressionGzip compresses the body, and the signature covers the
// bytes as sent.
//
// # Answers
//
// A 2xx is delivered. Anything else is a failed attempt whose result label
// (destination.Result3xx, Result4xx, Result5xx, ResultTimeout, ResultNetwork) is what
// outbox_relay_delivery_attempts_total counts; a Retry-After is passed on, a 410 Gone is
// reported as Result.Gone, and a redirect is not followed (a RedirectError names where it
// pointed).
//
// # Connections
//
// For a direct connection, a lean HTTP/1.1 client keeps up to MaxConns connections alive and
// writes each request in one call: it costs about half the CPU of net/http's client per request,
// which on a machine shared with PostgreSQL is most of the relay's cost. With Config.Proxy (the
// egress proxy of partner endpoints) the same client goes through a CONNECT tunnel to an
// address it resolved and checked itself. Otherwise, when the environment's proxy settings
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) apply to the URL, net/http's client is used instead,
// through the proxy.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// Config configures a webhook destination. URL and Secrets are required.
type Config struct {
	URL string
	// Secrets sign every request; several mean rotation (one signature per secret).
	Secrets []string
	// Scheme is the signature scheme. The zero value is signature.XSignature.
	Scheme signature.Scheme
	// Timeout bounds one attempt, from connecting to reading the answer. If zero, 10s.
	Timeout time.Duration
	// MaxConns is the number of kept-alive connections. If zero, 64.
	MaxConns int
	// UserAgent, if set, is sent as User-Agent.
	UserAgent string
	// TLS, if set, configures https connections (for example a private CA's RootCAs).
	TLS *tls.Config
	// Format of one-event requests: raw or cloudevents (binary mode). Empty: raw. Batches are
	// always CloudEvents batch mode.
	Format Format
	// Source is the CloudEvents source; if empty, DefaultSource; if that is empty too,
	// "/outbox-relay".
	Source string
	// DefaultSource is the source when Source is empty (the relay passes
	// "/outbox-relay/<pipeline>"). Empty: "/outbox-relay".
	DefaultSource string
	// Compression of request bodies: gzip sends Content-Encoding: gzip, and the signature
	// covers the compressed bytes as sent. Empty or none: uncompressed.
	Compression Compression
	// Keys, if set, are the HMAC keys to sign with (signature.Keys of the secrets) instead of
	// Secrets: a partner endpoint's, opened from its sealed secrets. Nil: from Secrets.
	Keys [][]byte
	// Control, if set, is called on every connection's socket before it connects (as
	// net.Dialer.Control): the URL guard of partner endpoints refuses addresses there. Nil:
	// none.
	Control func(network, address string, c syscall.RawConn) error
	// Proxy, if set, is the outbound proxy every connection goes through (the relay's
	// --egress-proxy, or an endpoint's egress_proxy): a CONNECT tunnel, for http and https URLs
	// alike, to the address this client resolved and Control admitted, so the proxy never
	// resolves a name itself; its user:password, if any, is sent as Proxy-Authorization. A
	// failure of the proxy itself is a ProxyError, reported as destination.ResultProxy and
	// Result.Unblamed. Nil: direct, or the environment's proxy settings.
	Proxy *url.URL
	// Resolver looks up the URL's host. Nil: net.DefaultResolver.
	Resolver *net.Resolver
	// KeepAnswers keeps the start of every answer's body (up to 1 KB) in Result.Answer, a 2xx
	// answer's too: the API's test attempt shows what the partner's server said. False: only a
	// failed answer's, so that a delivery keeps nothing.
	KeepAnswers bool
}

// Destination sends one signed POST per attempt; it is the destination.Destination (a
// destination.BatchDestination) for an HTTP endpoint. It is safe for concurrent use.
type Destination struct {
	url     string
	signer  *signature.Signer
	scheme  signature.Scheme
	timeout time.Duration
	ua      string
	ce      bool   // one event per request in CloudEvents binary mode
	source  string // CloudEvents source
	gzip    bool
	raw     *rawClient   // direct connections
	client  *http.Client // when a proxy applies
	// keepAnswers: Config.KeepAnswers
	keepAnswers bool
}

// ParseURL checks that a webhook URL is an absolute http or https URL with a host. Its errors
// show the URL with any password hidden.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("no webhook URL: an absolute http:// or https:// URL is needed, e.g. https://consumer.example/webhooks")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("webhook URL %q is malformed: it must be an absolute http:// or https:// URL with a host "+
			"and no user:password, e.g. https://consumer.example/webhooks", redactURL(raw))
	}
	return u, nil
}

// redactURL hides a password in a URL that is about to be shown, parseable or not: whatever
// follows the first ':' of the part before the last '@' of the authority.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		return u.Redacted()
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	colon := strings.Index(raw[start:start+at], ":")
	if colon < 0 {
		return raw
	}
	return raw[:start+colon+1] + "xxxxx" + raw[start+at:]
}

var _ destination.BatchDestination = (*Destination)(nil)

// New validates the URL and secrets and builds the client: a lean HTTP/1.1 client for direct
// connections, or net/http's when the environment's proxy settings apply to the URL.
func New(cfg Config) (*Destination, error) {
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	keys := cfg.Keys
	if keys == nil {
		if keys, err = signature.Keys(cfg.Scheme, cfg.Secrets); err != nil {
			return nil, err
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = settings.RequestTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	w := &Destination{url: cfg.URL, signer: signature.NewSigner(keys), scheme: cfg.Scheme, timeout: cfg.Timeout, ua: cfg.UserAgent,
		ce: cfg.Format == FormatCloudEvents, source: cfg.Source, gzip: cfg.Compression == CompressionGzip, keepAnswers: cfg.KeepAnswers}
	if w.source == "" {
		w.source = cfg.DefaultSource
	}
	if w.source == "" {
		w.source = "/outbox-relay"
	}
	if cfg.Proxy != nil {
		w.raw = newRawClient(u, cfg.TLS, cfg.Timeout, cfg.MaxConns)
		w.raw.tunnel = newTunnel(cfg.Proxy, u, portOrDefault(u), cfg.Resolver, cfg.Control, cfg.Timeout)
	} else if proxy, _ := http.ProxyFromEnvironment(&http.Request{URL: u}); proxy != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = cfg.MaxConns * 2
		tr.MaxIdleConnsPerHost = cfg.MaxConns * 2
		tr.ResponseHeaderTimeout = cfg.Timeout
		tr.TLSClientConfig = cfg.TLS
		if cfg.Control != nil {
			d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: cfg.Control}
			tr.DialContext = d.DialContext
		}
		w.client = &http.Client{Transport: tr, CheckRedirect: noRedirects}
	} else {
		w.raw = newRawClient(u, cfg.TLS, cfg.Timeout, cfg.MaxConns)
		w.raw.dialer.Control = cfg.Control
		w.raw.dialer.Resolver = cfg.Resolver
	}
	if w.raw != nil {
		w.raw.keepAnswers = cfg.KeepAnswers
	}
	return w, nil
}

func portOrDefault(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return map[string]string{"http": "80", "https": "443"}[u.Scheme]
}

// Close releases idle connections. It may be called more than once; a Send after it opens a
// new connection.
func (w *Destination) Close() {
	if w.raw != nil {
		w.raw.close()
	}
	if w.client != nil {
		w.client.CloseIdleConnections()
	}
}

// noRedirects makes a 3xx a failed attempt, as Standard Webhooks advises, instead of following
// it to a URL that was never configured.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Send makes one attempt (1-based) to deliver m: delivered when answered 2xx.
func (w *Destination) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	ts := time.Now().Unix()
	body := m.Payload
	var buf *bodyBuf
	if w.gzip {
		buf = getBody()
		defer putBody(buf)
		body = buf.gzip(body)
	}
	heads := func(h headerSink) {
		if w.ce {
			w.eachCEHeader(m, attempt, ts, body, h)
		} else {
			w.eachHeader(m, attempt, ts, body, h)
		}
	}
	return w.post(ctx, heads, body)
}

// SendBatch makes one attempt to deliver ms in one request, as a CloudEvents batch: delivered
// (every event) when answered 2xx.
func (w *Destination) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	ts := time.Now().Unix()
	buf := getBody()
	defer putBody(buf)
	body, err := w.appendBatch(buf.plain[:0], ms)
	buf.plain = body
	if err != nil {
		return destination.Result{Err: err, Label: destination.ResultNetwork}
	}
	if w.gzip {
		body = buf.gzip(body)
	}
	return w.post(ctx, func(h headerSink) { w.eachBatchHeader(ms, attempt, ts, body, h) }, body)
}

// post sends one request with the headers heads passes and body.
func (w *Destination) post(ctx context.Context, heads func(headerSink), body []byte) destination.Result {
	if w.raw != nil {
		resp, err := w.raw.post(ctx, func(b []byte) []byte {
			h := rawHead{b}
			heads(&h)
			return h.b
		}, body)
		return result(ctx, resp, err)
	}
	return w.sendStd(ctx, heads, body)
}

// sendStd sends through net/http (used when a proxy applies).
func (w *Destination) sendStd(ctx context.Context, heads func(headerSink), body []byte) destination.Result {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	// net/http may still read the body after Do returns, and body may be a pooled buffer.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(bytes.Clone(body)))
	if err != nil {
		return destination.Result{Err: err, Label: destination.ResultNetwork}
	}
	heads(stdHead(req.Header))
	resp, err := w.client.Do(req)
	if err != nil {
		return result(ctx, response{}, err)
	}
	sink, answer := bodySink(resp.StatusCode, w.keepAnswers)
	_, _ = io.Copy(sink, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	r := response{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), location: loc[:min(len(loc), maxLocation)]}
	if answer != nil {
		r.answer = answer.b
	}
	return result(ctx, r, nil)
}

func result(ctx context.Context, resp response, err error) destination.Result {
	var pe *ProxyError
	if errors.As(err, &pe) {
		return destination.Result{Err: err, Label: destination.ResultProxy, Unblamed: true}
	}
	if err != nil {
		return destination.Result{Err: err, Label: errorResult(ctx, err)}
	}
	r := destination.Result{Delivered: resp.status >= 200 && resp.status < 300, Status: resp.status,
		Label: statusResult(resp.status), Gone: resp.status == http.StatusGone, Answer: resp.answer}
	if d, ok := retryAfter(resp.retryAfter, time.Now()); ok {
		r.RetryAfter = d
	}
	if resp.status >= 300 && resp.status < 400 {
		// The error carries what the log line and last_error need: the answer is a redirect, it
		// was not followed, and where it pointed.
		r.Err = &RedirectError{Status: resp.status, Location: redactURL(resp.location)}
	}
	return r
}

// RedirectError is a 3xx answer, which counts as a failed attempt: redirects are not followed
// (Standard Webhooks advises against it), so the configured URL should be the final one.
type RedirectError struct {
	Status   int
	Location string // as answered, with any password hidden; empty if none was sent
}

func (e *RedirectError) Error() string {
	if e.Location == "" {
		return fmt.Sprintf("HTTP %d redirect without a Location; redirects are not followed", e.Status)
	}
	return fmt.Sprintf("HTTP %d redirect to %q; redirects are not followed: configure the webhook URL as the final address",
		e.Status, e.Location)
}

// headerSink receives request headers; names are canonical.
type headerSink interface {
	add(k, v string)
	addBytes(k string, v []byte)
}

// rawHead appends header lines to a request being written.
type rawHead struct{ b []byte }

func (h *rawHead) add(k, v string) {
	h.b = append(append(append(append(h.b, k...), ": "...), v...), "\r\n"...)
}

func (h *rawHead) addBytes(k string, v []byte) {
	h.b = append(append(append(append(h.b, k...), ": "...), v...), "\r\n"...)
}

// stdHead sets headers on a net/http request.
type stdHead http.Header

func (h stdHead) add(k, v string)             { h[k] = append(h[k], v) }
func (h stdHead) addBytes(k string, v []byte) { h[k] = append(h[k], string(v)) }

// eachHeader passes every header of one attempt to h: the public contract, the signature of this
// attempt, then headers forwarded from the row's headers column. Values from the row are made
// safe for a header line.
func (w *Destination) eachHeader(m *envelope.Message, attempt int, ts int64, body []byte, h headerSink) {
	h.add("Content-Type", "application/json")
	envelope.EventHeaders(m, h.add)
	var num [20]byte
	h.addBytes("X-Attempt", strconv.AppendInt(num[:0], int64(attempt), 10))
	if w.ua != "" {
		h.add("User-Agent", w.ua)
	}
	tsText := strconv.AppendInt(num[:0], ts, 10)
	var sig [160]byte
	if w.scheme == signature.StandardWebhooks {
		h.add("Webhook-Id", envelope.HeaderValue(m.ID))
		h.addBytes("Webhook-Timestamp", tsText)
		h.addBytes("Webhook-Signature", w.signer.AppendStandard(sig[:0], m.ID, ts, body))
	} else {
		h.addBytes("X-Timestamp", tsText)
		h.addBytes("X-Signature", w.signer.AppendX(sig[:0], ts, body))
	}
	if w.gzip {
		h.add("Content-Encoding", "gzip")
	}
	if len(m.Headers) > 0 {
		envelope.ForwardHeaders(m.Headers, h.add)
	}
}

func statusResult(code int) string {
	switch {
	case code >= 200 && code < 300:
		return destination.ResultSuccess
	case code >= 300 && code < 400:
		return destination.Result3xx
	case code >= 400 && code < 500:
		return destination.Result4xx
	}
	return destination.Result5xx // 5xx, and anything else a server answers, a failure too
}

func errorResult(ctx context.Context, err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return destination.ResultTimeout
	}
	return destination.ResultNetwork
}
