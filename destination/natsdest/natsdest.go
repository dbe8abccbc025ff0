// Package natsdest is a destination.Destination that publishes each event to NATS JetStream and
// counts it delivered only once JetStream acknowledged it (the PubAck: the stream stored it, on
// a quorum of its replicas when replicated).
//
// Message: the subject comes from Config.Subject, the data is the event's payload (the same
// bytes as a webhook body), and the headers are Nats-Msg-Id = the event id (so JetStream's
// duplicate window drops a re-publish after a retry or a relay restart) plus the webhook
// contract's X-Event-Id, X-Event-Type, X-Aggregate-Type, X-Aggregate-Id, X-Event-Sequence and
// the forwarded traceparent/tracestate/X-* of the row (envelope.EachHeader).
//
// Order: the publisher keeps one event per aggregate in flight and sends the next one only
// after this destination reported the previous one delivered, that is after its PubAck. So
// within a stream, the first appearance of each aggregate's events is in commit order, across
// retries and relay restarts: a retry re-publishes the same message id, which the stream
// drops if it already stored it within its duplicate window. Events of different aggregates
// are published concurrently (up to the relay's max in flight) on one connection.
//
// This package is apart from the engine and from the destination contract so that programs using only webhooks do not link the
// NATS client.
package natsdest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// DefaultSubject is the subject template used when Config.Subject is empty.
const DefaultSubject = settings.NATSSubject

// DefaultRequestTimeout bounds one publish (until its PubAck) when Config.RequestTimeout is zero.
const DefaultRequestTimeout = settings.RequestTimeout

// Config configures the NATS JetStream destination (the `nats:` key of a pipeline, or the
// --nats-* flags). Only URL is required.
type Config struct {
	// URL is the server, or a comma-separated list of servers, e.g. nats://n1:4222,nats://n2:4222.
	// Required.
	URL string `yaml:"url"`
	// Subject is the subject template. Placeholders: {aggregate_type}, {aggregate_id},
	// {event_type}; in a value, each character NATS forbids in a subject token (space, tab,
	// CR, LF, '.', '*', '>') becomes '_', and an empty value becomes '_'. If empty,
	// DefaultSubject.
	Subject string `yaml:"subject"`
	// CredsFile, if set, is a NATS credentials file (JWT and NKey seed) to authenticate with.
	CredsFile string `yaml:"creds_file"`
	// TLS, if any field is set, configures TLS to the servers. Zero: plain TCP unless a tls://
	// URL asks for TLS with the system roots.
	TLS TLSConfig `yaml:"tls"`
	// RequestTimeout bounds one publish, until the PubAck. If zero, DefaultRequestTimeout.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// CreateStream, if set, asks the relay to create the stream when no stream captures the
	// subjects at start-up. Nil: a missing stream is a start-up error that names the fix.
	CreateStream *StreamConfig `yaml:"create_stream"`
}

// TLSConfig names PEM files. CA alone verifies the servers with a private CA; Cert and Key
// (both or neither) authenticate the relay with a client certificate.
type TLSConfig struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// StreamConfig is the stream the relay creates when none captures its subjects.
type StreamConfig struct {
	// Name of the stream, e.g. OUTBOX. Required.
	Name string `yaml:"name"`
	// Replicas is the number of copies (1 to 5). If zero, 1.
	Replicas int `yaml:"replicas"`
	// MaxAge, if positive, drops messages older than this. Zero: kept until removed otherwise.
	MaxAge time.Duration `yaml:"max_age"`
}

func (t TLSConfig) set() bool { return t.CA != "" || t.Cert != "" || t.Key != "" }

// Validate checks the configuration without connecting; its errors name the fix.
func (c Config) Validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return errors.New("nats: no server URL: set nats.url (or --nats-url), e.g. nats://127.0.0.1:4222")
	}
	for _, s := range strings.Split(c.URL, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return fmt.Errorf("nats: url %q has an empty entry: separate servers with single commas", c.URL)
		}
		if strings.Contains(s, "://") {
			u, err := url.Parse(s)
			if err != nil || u.Host == "" {
				return fmt.Errorf("nats: server %q is malformed: use nats://host:port or tls://host:port", redact(s))
			}
			switch u.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return fmt.Errorf("nats: server %q has scheme %q: use nats:// or tls://", redact(s), u.Scheme)
			}
		}
	}
	if _, err := parseTemplate(c.subject()); err != nil {
		return err
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return errors.New("nats: tls.cert and tls.key go together: set both (a client certificate) or neither")
	}
	if c.RequestTimeout < 0 {
		return errors.New("nats: request_timeout is negative: leave it 0 for the default (10s) or give a positive duration")
	}
	if s := c.CreateStream; s != nil {
		if s.Name == "" || strings.ContainsAny(s.Name, " \t\r\n.*>/\\") {
			return fmt.Errorf("nats: create_stream.name %q is not a valid stream name: use letters, digits, '-' or '_', e.g. OUTBOX", s.Name)
		}
		if s.Replicas < 0 || s.Replicas > 5 {
			return fmt.Errorf("nats: create_stream.replicas is %d: JetStream allows 1 to 5", s.Replicas)
		}
		if s.MaxAge < 0 {
			return errors.New("nats: create_stream.max_age is negative: leave it 0 to keep messages or give a positive duration")
		}
	}
	return nil
}

func (c Config) subject() string {
	if c.Subject == "" {
		return DefaultSubject
	}
	return c.Subject
}

// redact hides a password in a server URL.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparseable URL)"
}

// Destination publishes events to JetStream. It is safe for concurrent use.
type Destination struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	tmpl    template
	timeout time.Duration
	log     *slog.Logger
}

var _ destination.PartialBatchDestination = (*Destination)(nil)

// New validates cfg, connects, and checks that a stream captures the subjects the template
// can produce, creating it if cfg.CreateStream asks. Servers that cannot be reached are
// retried (logged to log; nil: slog.Default()) until ctx ends; a missing stream is an error at
// once. Close releases the connection.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tmpl, _ := parseTemplate(cfg.subject())
	opts := []nats.Option{nats.Name("outbox-relay"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats: disconnected; reconnecting", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		})}
	if cfg.CredsFile != "" {
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, fmt.Errorf("nats: creds_file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS.set() {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	// Batches publish asynchronously: the publisher bounds what is outstanding (its batches in
	// flight), so the client's own cap would only stall; an unanswered publish is dropped after
	// the request timeout rather than kept forever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(timeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	d := &Destination{nc: nc, js: js, tmpl: tmpl, timeout: timeout, log: log}
	if err := d.checkStream(ctx, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	return d, nil
}

func tlsConfig(t TLSConfig) (*tls.Config, error) {
	return tlsfiles.Load("nats", t.CA, t.Cert, t.Key)
}

// ErrNoStream is returned by New when no stream captures the subjects and CreateStream is nil.
var ErrNoStream = errors.New("nats: no JetStream stream captures the relay's subjects")

// checkStream finds a stream whose subjects cover every subject the template can produce (the
// template with each placeholder token as '*'), or creates one. Failures to reach JetStream are
// retried until ctx ends.
func (d *Destination) checkStream(ctx context.Context, cfg Config) error {
	wild := d.tmpl.wildcard()
	return retry.Do(ctx, retry.Backoff{First: 250 * time.Millisecond, Max: 5 * time.Second}, func(ctx context.Context) error {
		return d.findOrCreateStream(ctx, cfg, wild)
	}, func(err error, wait time.Duration) {
		d.log.Warn("nats: JetStream not reachable; retrying", "error", err, "retry_in", wait)
	})
}

// findOrCreateStream is one attempt of checkStream: nil once a stream covers wild, an error
// marked retry.Stop when none does and none is to be created, or when JetStream refuses to
// create it; any other error (JetStream not answering, or a stream of that name appearing
// meanwhile) is retried.
func (d *Destination) findOrCreateStream(ctx context.Context, cfg Config, wild string) error {
	name, err := d.findStream(ctx, wild)
	if err != nil {
		return err
	}
	if name != "" {
		d.log.Info("nats: stream found", "stream", name, "subjects", wild)
		return nil
	}
	if cfg.CreateStream == nil {
		return retry.Stop(fmt.Errorf("%w (%s): create one, e.g. `nats stream add OUTBOX --subjects '%s' --storage file --replicas 3 --dupe-window 2m`, "+
			"or set nats.create_stream (name, replicas, max_age) to let the relay create it", ErrNoStream, wild, wild))
	}
	s := cfg.CreateStream
	replicas := max(s.Replicas, 1)
	_, err = d.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.Name, Subjects: []string{wild},
		Storage: jetstream.FileStorage, Replicas: replicas, MaxAge: s.MaxAge, Duplicates: 2 * time.Minute})
	if err == nil {
		d.log.Info("nats: stream created", "stream", s.Name, "subjects", wild, "replicas", replicas)
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode != jetstream.JSErrCodeStreamNameInUse && apiErr.Code != 503 {
		return retry.Stop(fmt.Errorf("nats: create_stream %s for %s: %w", s.Name, wild, err))
	}
	return err
}

// findStream returns the name of a stream one of whose subjects covers wild, or "" if none
// does. An error means JetStream did not answer.
func (d *Destination) findStream(ctx context.Context, wild string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	l := d.js.ListStreams(ctx, jetstream.WithStreamListSubject(wild))
	found := ""
	for info := range l.Info() {
		for _, s := range info.Config.Subjects {
			if found == "" && covers(s, wild) {
				found = info.Config.Name
			}
		}
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return "", err
	}
	return found, nil
}

// covers reports whether every subject matching sub also matches the stream subject filter f.
func covers(f, sub string) bool {
	ft, st := strings.Split(f, "."), strings.Split(sub, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if t != "*" && (t != st[i] || st[i] == "*" || st[i] == ">") {
			return false
		}
	}
	return len(ft) == len(st)
}

// Close closes the connection, after flushing what it buffered. It may be called more than once.
func (d *Destination) Close() {
	if d.nc != nil && !d.nc.IsClosed() {
		_ = d.nc.FlushTimeout(time.Second)
		d.nc.Close()
	}
}

// MsgIDHeader is the JetStream de-duplication header, set to the event id.
const MsgIDHeader = "Nats-Msg-Id"

// Send publishes m and waits for its PubAck: delivered once JetStream stored it (or reported
// it a duplicate of a message it already stored).
func (d *Destination) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	msg := d.Message(m)
	ack, err := d.js.PublishMsg(ctx, msg)
	if err != nil {
		return destination.Result{Err: err, Label: label(ctx, err)}
	}
	if ack.Duplicate {
		d.log.Debug("nats: already stored (duplicate window)", "event_id", m.ID, "stream", ack.Stream, "attempt", attempt)
	}
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// SendBatch publishes ms without waiting between them and waits for every PubAck: delivered
// only when JetStream acknowledged each one. The publisher gives it at most one event per
// aggregate (PartialBatches), so a batch that failed half way, whose stored messages JetStream
// drops as duplicates when the batch is retried, cannot reorder an aggregate.
func (d *Destination) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	futs := make([]jetstream.PubAckFuture, 0, len(ms))
	var failed error
	for _, m := range ms {
		f, err := d.js.PublishMsgAsync(d.Message(m))
		if err != nil {
			failed = err
			break
		}
		futs = append(futs, f)
	}
	stored := 0
wait:
	for _, f := range futs {
		select {
		case <-f.Ok():
			stored++
		case err := <-f.Err():
			if failed == nil {
				failed = err
			}
		case <-ctx.Done():
			if failed == nil {
				failed = fmt.Errorf("nats: %d of %d messages not acknowledged within %s: %w", len(futs)-stored, len(ms), d.timeout, context.Cause(ctx))
			}
			break wait
		}
	}
	if failed != nil {
		return destination.Result{Err: failed, Label: label(ctx, failed)}
	}
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// PartialBatches implements destination.PartialBatchDestination: each message of a batch is
// acknowledged on its own.
func (d *Destination) PartialBatches() {}

// Message builds the message of m: subject, data and headers.
func (d *Destination) Message(m *envelope.Message) *nats.Msg {
	h := make(nats.Header, 8)
	h[MsgIDHeader] = []string{m.ID}
	envelope.EachHeader(m, func(k, v string) { h[k] = append(h[k], v) })
	return &nats.Msg{Subject: d.tmpl.expand(m), Data: m.Payload, Header: h}
}

// label classifies a failed publish for the result label.
func label(ctx context.Context, err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || ctx.Err() == context.DeadlineExceeded:
		return destination.ResultTimeout
	case errors.As(err, &apiErr):
		return destination.ResultRejected
	}
	return destination.ResultNetwork
}

var _ destination.Opener = Config{}

// Open is New for a relay pipeline (destination.Opener): c.RequestTimeout, if zero, is the
// pipeline's.
func (c Config) Open(ctx context.Context, o destination.OpenOptions) (destination.Destination, error) {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = o.RequestTimeout
	}
	d, err := New(ctx, c, o.Logger)
	if err != nil {
		return nil, err // not a nil *Destination in a non-nil interface
	}
	return d, nil
}
