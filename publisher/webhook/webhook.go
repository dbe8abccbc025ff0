package publisher

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
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/signature"
)

// WebhookConfig configures the HTTP side of delivery.
type WebhookConfig struct {
	URL string
	// Secrets sign every request; several mean rotation (one signature per secret).
	Secrets []string
	Scheme  signature.Scheme
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
	Source        string
	DefaultSource string
	// Compression of request bodies: gzip sends Content-Encoding: gzip, and the signature
	// covers the compressed bytes as sent. Empty or none: uncompressed.
	Compression Compression
}

// Webhook sends one signed POST per attempt; it is the Publisher's Destination for an HTTP
// endpoint.
type Webhook struct {
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

// NewWebhook validates the URL and secrets and builds the client: a lean HTTP/1.1 client for
// direct connections, or net/http's when the environment's proxy settings apply to the URL.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	keys, err := signature.Keys(cfg.Scheme, cfg.Secrets)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	w := &Webhook{url: cfg.URL, signer: signature.NewSigner(keys), scheme: cfg.Scheme, timeout: cfg.Timeout, ua: cfg.UserAgent,
		ce: cfg.Format == FormatCloudEvents, source: cfg.Source, gzip: cfg.Compression == CompressionGzip}
	if w.source == "" {
		w.source = cfg.DefaultSource
	}
	if w.source == "" {
		w.source = "/outbox-relay"
	}
	if proxy, _ := http.ProxyFromEnvironment(&http.Request{URL: u}); proxy != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = cfg.MaxConns * 2
		tr.MaxIdleConnsPerHost = cfg.MaxConns * 2
		tr.ResponseHeaderTimeout = cfg.Timeout
		tr.TLSClientConfig = cfg.TLS
		w.client = &http.Client{Transport: tr, CheckRedirect: noRedirects}
	} else {
		w.raw = newRawClient(u, cfg.TLS, cfg.Timeout, cfg.MaxConns)
	}
	return w, nil
}

// Close releases idle connections. It may be called more than once; a Send after it opens a
// new connection.
func (w *Webhook) Close() {
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

// Send makes one attempt (1-based) to deliver ev: delivered when answered 2xx.
func (w *Webhook) Send(ctx context.Context, ev *cdc.Event, attempt int) Result {
	ts := time.Now().Unix()
	body := ev.Payload
	var buf *bodyBuf
	if w.gzip {
		buf = getBody()
		defer putBody(buf)
		body = buf.gzip(body)
	}
	heads := func(h headerSink) {
		if w.ce {
			w.eachCEHeader(ev, attempt, ts, body, h)
		} else {
			w.eachHeader(ev, attempt, ts, body, h)
		}
	}
	return w.post(ctx, heads, body)
}

// SendBatch makes one attempt to deliver evs in one request, as a CloudEvents batch: delivered
// (every event) when answered 2xx.
func (w *Webhook) SendBatch(ctx context.Context, evs []*cdc.Event, attempt int) Result {
	ts := time.Now().Unix()
	buf := getBody()
	defer putBody(buf)
	body, err := w.appendBatch(buf.plain[:0], evs)
	buf.plain = body
	if err != nil {
		return Result{Err: err, Label: ResultNetwork}
	}
	if w.gzip {
		body = buf.gzip(body)
	}
	return w.post(ctx, func(h headerSink) { w.eachBatchHeader(evs, attempt, ts, body, h) }, body)
}

// post sends one request with the headers heads passes and body.
func (w *Webhook) post(ctx context.Context, heads func(headerSink), body []byte) Result {
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
func (w *Webhook) sendStd(ctx context.Context, heads func(headerSink), body []byte) Result {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	// net/http may still read the body after Do returns, and body may be a pooled buffer.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(bytes.Clone(body)))
	if err != nil {
		return Result{Err: err, Label: ResultNetwork}
	}
	heads(stdHead(req.Header))
	resp, err := w.client.Do(req)
	if err != nil {
		return result(ctx, response{}, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	return result(ctx, response{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"),
		location: loc[:min(len(loc), maxLocation)]}, nil)
}

func result(ctx context.Context, resp response, err error) Result {
	if err != nil {
		return Result{Err: err, Label: errorResult(ctx, err)}
	}
	r := Result{Delivered: resp.status >= 200 && resp.status < 300, Status: resp.status,
		Label: statusResult(resp.status), Gone: resp.status == http.StatusGone}
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
func (w *Webhook) eachHeader(ev *cdc.Event, attempt int, ts int64, body []byte, h headerSink) {
	h.add("Content-Type", "application/json")
	eventHeaders(ev, h)
	var num [20]byte
	h.addBytes("X-Attempt", strconv.AppendInt(num[:0], int64(attempt), 10))
	if w.ua != "" {
		h.add("User-Agent", w.ua)
	}
	tsText := strconv.AppendInt(num[:0], ts, 10)
	var sig [160]byte
	if w.scheme == signature.StandardWebhooks {
		h.add("Webhook-Id", headerValue(ev.ID))
		h.addBytes("Webhook-Timestamp", tsText)
		h.addBytes("Webhook-Signature", w.signer.AppendStandard(sig[:0], ev.ID, ts, body))
	} else {
		h.addBytes("X-Timestamp", tsText)
		h.addBytes("X-Signature", w.signer.AppendX(sig[:0], ts, body))
	}
	if w.gzip {
		h.add("Content-Encoding", "gzip")
	}
	if len(ev.Headers) > 0 {
		forwardHeaders(ev.Headers, h.add)
	}
}

// Sequence is the X-Event-Sequence value: the commit LSN and the index within the transaction,
// as fixed-width uppercase hex ("0000000001538A30-00000003"), so it rises strictly per aggregate
// in commit order when compared as a string.
func Sequence(ev *cdc.Event) string {
	var b [25]byte
	return string(appendSequence(b[:0], ev))
}

func appendSequence(dst []byte, ev *cdc.Event) []byte {
	if ev.Seq != "" {
		return append(dst, ev.Seq...)
	}
	var b [25]byte
	hexFixed(b[:16], uint64(ev.Tx.CommitLSN))
	b[16] = '-'
	hexFixed(b[17:], uint64(ev.Index))
	return append(dst, b[:]...)
}

// hexFixed writes v as uppercase hex filling dst, most significant digit first.
func hexFixed(dst []byte, v uint64) {
	const digits = "0123456789ABCDEF"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xF]
		v >>= 4
	}
}

func statusResult(code int) string {
	switch {
	case code >= 200 && code < 300:
		return ResultSuccess
	case code >= 300 && code < 400:
		return Result3xx
	case code >= 400 && code < 500:
		return Result4xx
	}
	return Result5xx // 5xx, and anything else a server answers, a failure too
}

func errorResult(ctx context.Context, err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return ResultTimeout
	}
	return ResultNetwork
}
