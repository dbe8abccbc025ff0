package publisher

import (
	"context"
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
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/signature"
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
}

// Webhook sends one signed POST per attempt.
type Webhook struct {
	url     string
	keys    [][]byte
	scheme  signature.Scheme
	timeout time.Duration
	ua      string
	client  *http.Client
}

// ParseURL checks that a webhook URL is an absolute http or https URL with a host.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("no webhook URL: set WEBHOOK_URL or --webhook-url, e.g. https://consumer.example/webhooks")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook URL %q is malformed: it must be an absolute http:// or https:// URL with a host, "+
			"e.g. https://consumer.example/webhooks", raw)
	}
	return u, nil
}

// NewWebhook validates the URL and secrets and builds the client.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if _, err := ParseURL(cfg.URL); err != nil {
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
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = cfg.MaxConns * 2
	tr.MaxIdleConnsPerHost = cfg.MaxConns * 2
	tr.ResponseHeaderTimeout = cfg.Timeout
	return &Webhook{
		url: cfg.URL, keys: keys, scheme: cfg.Scheme, timeout: cfg.Timeout, ua: cfg.UserAgent,
		client: &http.Client{Transport: tr, CheckRedirect: noRedirects},
	}, nil
}

// noRedirects makes a 3xx a failed attempt, as Standard Webhooks advises, instead of following
// it to a URL that was never configured.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// outcome is the result of one attempt.
type outcome struct {
	status     int
	retryAfter string
	err        error
	result     string // metrics label
}

func (o outcome) ok() bool { return o.err == nil && o.status >= 200 && o.status < 300 }

// Send makes one attempt (1-based) to deliver ev.
func (w *Webhook) Send(ctx context.Context, ev *cdc.Event, attempt int) outcome {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, strings.NewReader(string(ev.Payload)))
	if err != nil {
		return outcome{err: err, result: metrics.ResultNetwork}
	}
	w.setHeaders(req.Header, ev, attempt, time.Now().Unix())
	resp, err := w.client.Do(req)
	if err != nil {
		return outcome{err: err, result: errorResult(ctx, err)}
	}
	// Drain (bounded) and close, so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	o := outcome{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), result: statusResult(resp.StatusCode)}
	return o
}

// setHeaders writes the public contract: metadata headers and the signature of this attempt.
func (w *Webhook) setHeaders(h http.Header, ev *cdc.Event, attempt int, ts int64) {
	set := func(k, v string) { h[k] = []string{v} } // keys are already canonical
	set("Content-Type", "application/json")
	set("X-Event-Id", ev.ID)
	set("X-Event-Type", ev.EventType)
	set("X-Aggregate-Type", ev.AggregateType)
	set("X-Aggregate-Id", ev.AggregateID)
	set("X-Attempt", strconv.Itoa(attempt))
	set("X-Event-Sequence", Sequence(ev))
	if w.ua != "" {
		set("User-Agent", w.ua)
	}
	tsText := strconv.FormatInt(ts, 10)
	if w.scheme == signature.StandardWebhooks {
		set("Webhook-Id", ev.ID)
		set("Webhook-Timestamp", tsText)
		set("Webhook-Signature", string(signature.AppendStandard(nil, w.keys, ev.ID, ts, ev.Payload)))
		return
	}
	set("X-Timestamp", tsText)
	set("X-Signature", string(signature.AppendX(nil, w.keys, ts, ev.Payload)))
}

// Sequence is the X-Event-Sequence value: the commit LSN and the index within the transaction,
// as fixed-width uppercase hex ("0000000001538A30-00000003"), so it rises strictly per aggregate
// in commit order when compared as a string.
func Sequence(ev *cdc.Event) string {
	if ev.Seq != "" {
		return ev.Seq
	}
	var b [25]byte
	hexFixed(b[:16], uint64(ev.Tx.CommitLSN))
	b[16] = '-'
	hexFixed(b[17:], uint64(ev.Index))
	return string(b[:])
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
		return metrics.ResultSuccess
	case code >= 400 && code < 500:
		return metrics.Result4xx
	}
	return metrics.Result5xx // 5xx, and 1xx/3xx, which are failures too
}

func errorResult(ctx context.Context, err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return metrics.ResultTimeout
	}
	return metrics.ResultNetwork
}
