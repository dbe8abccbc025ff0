// Package kafkadest is a destination.Destination that produces each event to Kafka with
// franz-go's idempotent producer and counts it delivered only once the partition leader
// acknowledged it with acks=all (every in-sync replica has it).
//
// Record, following Debezium's outbox event router so that its consumers work unchanged: topic
// from Config.Topic (default outbox.event.{aggregate_type}, the router's
// outbox.event.${routedByValue} routed by aggregatetype), key = aggregate id (the router's
// default: one aggregate, one partition), value = the payload bytes (as the webhook body),
// header id = the event id (the router's header), plus the webhook contract's X-Event-Id,
// X-Event-Type, X-Aggregate-Type, X-Aggregate-Id, X-Event-Sequence and the row's forwarded
// traceparent/tracestate/X-* headers (envelope.EachHeader).
//
// Order: the publisher keeps one event per aggregate in flight and sends the next only after
// this destination reported the previous one acknowledged; the key keeps an aggregate on one
// partition, and the idempotent producer keeps order within a partition across its own
// retries. So each aggregate's first appearances are in commit order.
//
// This package is apart from the engine and from the destination contract so that programs using only webhooks do not link the
// Kafka client.
package kafkadest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/internal/tlsfiles"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// DefaultTopic is the topic template when Config.Topic is empty: the outbox event router's
// default.
const DefaultTopic = settings.KafkaTopic

// DefaultRequestTimeout bounds one produce (until acknowledged) when Config.RequestTimeout is zero.
const DefaultRequestTimeout = settings.RequestTimeout

// IDHeader is the record header carrying the event id, as the outbox event router names it.
const IDHeader = "id"

// Config configures the Kafka destination (the `kafka:` key of a pipeline, or the --kafka-*
// flags). Only Brokers is required. acks=all and the idempotent producer are fixed.
type Config struct {
	// Brokers are the seed brokers, comma-separated host:port. Required.
	Brokers string `yaml:"brokers"`
	// Topic is the topic template. Placeholders: {aggregate_type}, {aggregate_id},
	// {event_type}; in a value, each character Kafka forbids in a topic name (anything but
	// ASCII letters, digits, '.', '_' and '-') becomes '_', and an empty value becomes '_'.
	// If empty, DefaultTopic. Topics must exist unless the brokers create them on first use.
	Topic string `yaml:"topic"`
	// SASL, if Mechanism is set, authenticates with a user and password.
	SASL SASLConfig `yaml:"sasl"`
	// TLS, if Enabled or any file is set, connects with TLS. Zero: plain TCP.
	TLS TLSConfig `yaml:"tls"`
	// Compression of produced batches: none, gzip, snappy, lz4 or zstd. If empty, none.
	Compression string `yaml:"compression"`
	// RequestTimeout bounds one produce, until acknowledged. If zero, DefaultRequestTimeout.
	RequestTimeout time.Duration `yaml:"request_timeout"`
}

// SASLConfig is SASL/PLAIN or SASL/SCRAM authentication.
type SASLConfig struct {
	// Mechanism: plain, scram-sha-256 or scram-sha-512. Empty: no SASL.
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	// Password, or PasswordFile (read at start, trailing newline dropped).
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

// TLSConfig: Enabled alone uses the system roots; CA verifies the brokers with a private CA;
// Cert and Key (both or neither) are a client certificate.
type TLSConfig struct {
	Enabled bool   `yaml:"enabled"`
	CA      string `yaml:"ca"`
	Cert    string `yaml:"cert"`
	Key     string `yaml:"key"`
}

// Validate checks the configuration without connecting; its errors name the fix.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Brokers) == "" {
		return errors.New("kafka: no brokers: set kafka.brokers (or --kafka-brokers), e.g. 127.0.0.1:9092")
	}
	for _, b := range strings.Split(c.Brokers, ",") {
		if b = strings.TrimSpace(b); b == "" || strings.Contains(b, "://") {
			return fmt.Errorf("kafka: brokers %q: give host:port entries separated by single commas, without a scheme", c.Brokers)
		}
	}
	if _, err := parseTemplate(c.topic()); err != nil {
		return err
	}
	if _, err := codec(c.Compression); err != nil {
		return err
	}
	switch strings.ToLower(c.SASL.Mechanism) {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if c.SASL.User == "" || (c.SASL.Password == "") == (c.SASL.PasswordFile == "") {
			return errors.New("kafka: sasl needs a user and exactly one of password or password_file")
		}
	default:
		return fmt.Errorf("kafka: sasl.mechanism %q: use plain, scram-sha-256 or scram-sha-512", c.SASL.Mechanism)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return errors.New("kafka: tls.cert and tls.key go together: set both (a client certificate) or neither")
	}
	if c.RequestTimeout < 0 {
		return errors.New("kafka: request_timeout is negative: leave it 0 for the default (10s) or give a positive duration")
	}
	return nil
}

func (c Config) topic() string {
	if c.Topic == "" {
		return DefaultTopic
	}
	return c.Topic
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafka: compression %q: use none, gzip, snappy, lz4 or zstd", name)
}

// Destination produces events to Kafka. It is safe for concurrent use.
type Destination struct {
	cl      *kgo.Client
	tmpl    template
	timeout time.Duration
	log     *slog.Logger
}

var _ destination.PartialBatchDestination = (*Destination)(nil)

// New validates cfg, builds the idempotent acks=all producer and waits until a broker answers
// (retrying, logged to log, until ctx ends; nil: slog.Default()). Close releases it.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Destination, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tmpl, _ := parseTemplate(cfg.topic())
	comp, _ := codec(cfg.Compression)
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	var seeds []string
	for _, b := range strings.Split(cfg.Brokers, ",") {
		seeds = append(seeds, strings.TrimSpace(b))
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(comp), kgo.ProducerLinger(0), kgo.ClientID("outbox-relay"),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}
	if m := strings.ToLower(cfg.SASL.Mechanism); m != "" {
		pass := cfg.SASL.Password
		if cfg.SASL.PasswordFile != "" {
			b, err := os.ReadFile(cfg.SASL.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: sasl.password_file: %w", err)
			}
			pass = strings.TrimRight(string(b), "\r\n")
		}
		switch m {
		case "plain":
			opts = append(opts, kgo.SASL(plain.Auth{User: cfg.SASL.User, Pass: pass}.AsMechanism()))
		case "scram-sha-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.User, Pass: pass}.AsSha256Mechanism()))
		case "scram-sha-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.User, Pass: pass}.AsSha512Mechanism()))
		}
	}
	if t := cfg.TLS; t.Enabled || t.CA != "" || t.Cert != "" {
		tc, err := tlsConfig(t)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	d := &Destination{cl: cl, tmpl: tmpl, timeout: timeout, log: log}
	err = retry.Do(ctx, retry.Backoff{First: 250 * time.Millisecond, Max: 5 * time.Second}, func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return cl.Ping(pctx)
	}, func(err error, wait time.Duration) {
		log.Warn("kafka: no broker answers; retrying", "error", err, "retry_in", wait)
	})
	if err != nil {
		cl.Close()
		return nil, err // ctx ended: a broker that does not answer is retried until then
	}
	return d, nil
}

func tlsConfig(t TLSConfig) (*tls.Config, error) {
	return tlsfiles.Load("kafka", t.CA, t.Cert, t.Key)
}

// Close releases the client; records not yet acknowledged are failed (and so not confirmed).
func (d *Destination) Close() { d.cl.Close() }

// Send produces m and waits until the partition leader acknowledged it with acks=all, for at
// most the request timeout. A record already sent to a broker cannot be withdrawn (the
// idempotent producer keeps retrying it until the broker answers), so when the wait ends first
// the attempt is reported failed while the record stays in the producer: the retry produces
// the same event again behind it on the same partition, so at worst a duplicate appears later,
// never the aggregate's next event before it.
func (d *Destination) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	done := make(chan error, 1) // buffered: the promise never blocks on an abandoned wait
	d.cl.Produce(ctx, d.Record(m), func(_ *kgo.Record, err error) { done <- err })
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("kafka: not acknowledged within %s: %w", d.timeout, context.Cause(ctx))
	}
	if err != nil {
		return destination.Result{Err: err, Label: label(ctx, err)}
	}
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// SendBatch produces ms without waiting between them and waits until every one is
// acknowledged with acks=all, for at most the request timeout: delivered only when all are.
// The publisher gives it at most one event per aggregate (PartialBatches), so a batch that
// failed half way cannot reorder an aggregate; its retry produces the records that were
// already stored again (duplicates, with the same id header).
func (d *Destination) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	done := make(chan error, len(ms)) // buffered: no promise blocks on an abandoned wait
	for _, m := range ms {
		d.cl.Produce(ctx, d.Record(m), func(_ *kgo.Record, err error) { done <- err })
	}
	var err error
	for range ms {
		select {
		case e := <-done:
			if err == nil {
				err = e
			}
			continue
		case <-ctx.Done():
			err = fmt.Errorf("kafka: not every record acknowledged within %s: %w", d.timeout, context.Cause(ctx))
		}
		break
	}
	if err != nil {
		return destination.Result{Err: err, Label: label(ctx, err)}
	}
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// PartialBatches implements destination.PartialBatchDestination: each record of a batch is
// acknowledged on its own.
func (d *Destination) PartialBatches() {}

// Record builds the record of m: topic, key, value and headers.
func (d *Destination) Record(m *envelope.Message) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, 8)
	h = append(h, kgo.RecordHeader{Key: IDHeader, Value: []byte(m.ID)})
	envelope.EachHeader(m, func(k, v string) { h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)}) })
	return &kgo.Record{Topic: d.tmpl.expand(m), Key: []byte(m.AggregateID), Value: m.Payload, Headers: h}
}

func label(ctx context.Context, err error) string {
	var ke *kerr.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		return destination.ResultTimeout
	case errors.As(err, &ke):
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
