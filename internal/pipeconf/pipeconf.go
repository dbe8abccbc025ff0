// Package pipeconf reads the pipelines file of `outbox-relay run --config`: YAML whose values
// may name environment variables as ${NAME} (an unset one is an error), whose unknown keys are
// errors naming the key and its line, with durations (10s) and sizes (32MiB).
package pipeconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

// File is a parsed pipelines file.
type File struct {
	// DSN is the file's dsn; empty if it has none (--dsn / DB_DSN override it anyway).
	DSN string
	// Schema is the file's schema, of the relay's tables; empty if it has none (--schema /
	// OUTBOX_RELAY_SCHEMA override it).
	Schema    string
	Pipelines []relay.Pipeline
	// OperatorWebhookURL and OperatorWebhookSecret are the file's operator_webhook (url,
	// secret): where the endpoints' operational events go (relay.Config.OperatorWebhookURL).
	OperatorWebhookURL, OperatorWebhookSecret string
	// DeliveryLogRetention is the file's delivery_log_retention; zero if it has none
	// (--delivery-log-retention overrides it), negative for 0 (record none).
	DeliveryLogRetention time.Duration
	// Egress is the file's egress: {deny_private, allow, https_only, proxy}; the flags and
	// their environment variables override each key.
	Egress Egress
	// OTelEndpoint is the file's otel.endpoint: the OTLP receiver of the relay's traces
	// (--otel-endpoint and the OTEL_EXPORTER_OTLP_*ENDPOINT variables override it); empty if
	// it has none.
	OTelEndpoint string
}

// Egress is the file's egress section, each key with whether the file sets it.
type Egress struct {
	DenyPrivate, HTTPSOnly       bool
	SetDenyPrivate, SetHTTPSOnly bool
	Allow                        []string // nil: not set
	Proxy                        string
}

// Env looks up an environment variable; os.LookupEnv is one.
type Env func(name string) (string, bool)

// ErrConfig is wrapped by every error about the file's content.
var ErrConfig = errors.New("bad config")

// Load reads and parses the file at path with the process's environment.
func Load(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("read config: %w", err)
	}
	f, err := Parse(b, os.LookupEnv, os.ReadFile)
	if err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// scalar is one YAML value with its line, kept as text until it is expanded and converted.
type scalar struct {
	s    string
	line int
	set  bool
}

func (v *scalar) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: line %d: expected a single value, not a list or a map", ErrConfig, n.Line)
	}
	*v = scalar{s: n.Value, line: n.Line, set: true}
	return nil
}

type rawFile struct {
	DSN       scalar        `yaml:"dsn"`
	Schema    scalar        `yaml:"schema"`
	Pipelines []rawPipeline `yaml:"pipelines"`
	Operator  *rawOperator  `yaml:"operator_webhook"`
	// DeliveryLogRetention is of the process, as the delivery log is written by every pipeline
	// with endpoints and pruned once.
	DeliveryLogRetention scalar `yaml:"delivery_log_retention"`
	// Egress is of the process too: one guard serves every pipeline's endpoints.
	Egress *rawEgress `yaml:"egress"`
	// OTel is of the process: one exporter takes every pipeline's spans.
	OTel *rawOTel `yaml:"otel"`
}

type rawOTel struct {
	Endpoint scalar `yaml:"endpoint"`
}

type rawEgress struct {
	DenyPrivate scalar   `yaml:"deny_private"`
	Allow       []scalar `yaml:"allow"`
	HTTPSOnly   scalar   `yaml:"https_only"`
	Proxy       scalar   `yaml:"proxy"`
}

type rawOperator struct {
	URL    scalar `yaml:"url"`
	Secret scalar `yaml:"secret"`
}

type rawPipeline struct {
	Name              scalar      `yaml:"name"`
	Filter            scalar      `yaml:"filter"`
	Slot              scalar      `yaml:"slot"`
	Publication       scalar      `yaml:"publication"`
	Webhook           *rawWebhook `yaml:"webhook"`
	NATS              *rawNATS    `yaml:"nats"`
	Kafka             *rawKafka   `yaml:"kafka"`
	Format            scalar      `yaml:"format"`
	Source            scalar      `yaml:"source"`
	Batch             *rawBatch   `yaml:"batch"`
	Compression       scalar      `yaml:"compression"`
	Marks             scalar      `yaml:"marks"`
	OnGone            scalar      `yaml:"on_gone"`
	RetryMin          scalar      `yaml:"retry_min"`
	RetryMax          scalar      `yaml:"retry_max"`
	MaxAttempts       scalar      `yaml:"max_attempts"`
	MaxInFlight       scalar      `yaml:"max_in_flight"`
	MaxBufferedEvents scalar      `yaml:"max_buffered_events"`
	MaxBufferedBytes  scalar      `yaml:"max_buffered_bytes"`
	RateLimit         scalar      `yaml:"rate_limit"`
	Shadow            scalar      `yaml:"shadow"`
	Endpoints         scalar      `yaml:"endpoints"`
	SpillAfter        scalar      `yaml:"spill_after"`
	SpillSize         scalar      `yaml:"spill_size"`
	Breaker           scalar      `yaml:"breaker"`
	Backlog           scalar      `yaml:"backlog"`
	DeliveryLog       scalar      `yaml:"delivery_log"`
	DisableAfter      scalar      `yaml:"endpoint_disable_after"`
	Initial           scalar      `yaml:"initial"`
	Shards            scalar      `yaml:"shards"`
	Shard             scalar      `yaml:"shard"`
}

type rawWebhook struct {
	URL             scalar `yaml:"url"`
	Secret          scalar `yaml:"secret"`
	SecretFile      scalar `yaml:"secret_file"`
	SignatureScheme scalar `yaml:"signature_scheme"`
	RequestTimeout  scalar `yaml:"request_timeout"`
}

type rawBatch struct {
	MaxEvents scalar `yaml:"max_events"`
	MaxBytes  scalar `yaml:"max_bytes"`
	Linger    scalar `yaml:"linger"`
}

// rawNATS mirrors natsdest.Config key for key, so that every value gets ${NAME} and a line.
type rawNATS struct {
	URL            scalar     `yaml:"url"`
	Subject        scalar     `yaml:"subject"`
	CredsFile      scalar     `yaml:"creds_file"`
	TLS            rawTLS     `yaml:"tls"`
	RequestTimeout scalar     `yaml:"request_timeout"`
	CreateStream   *rawStream `yaml:"create_stream"`
}

type rawTLS struct {
	CA   scalar `yaml:"ca"`
	Cert scalar `yaml:"cert"`
	Key  scalar `yaml:"key"`
}

type rawStream struct {
	Name     scalar `yaml:"name"`
	Replicas scalar `yaml:"replicas"`
	MaxAge   scalar `yaml:"max_age"`
}

// rawKafka mirrors kafkadest.Config key for key.
type rawKafka struct {
	Brokers        scalar      `yaml:"brokers"`
	Topic          scalar      `yaml:"topic"`
	SASL           rawSASL     `yaml:"sasl"`
	TLS            rawKafkaTLS `yaml:"tls"`
	Compression    scalar      `yaml:"compression"`
	RequestTimeout scalar      `yaml:"request_timeout"`
}

type rawSASL struct {
	Mechanism    scalar `yaml:"mechanism"`
	User         scalar `yaml:"user"`
	Password     scalar `yaml:"password"`
	PasswordFile scalar `yaml:"password_file"`
}

type rawKafkaTLS struct {
	Enabled scalar `yaml:"enabled"`
	rawTLS  `yaml:",inline"`
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Parse parses a pipelines file. env resolves ${NAME}; readFile reads secret_file.
func Parse(data []byte, env Env, readFile func(string) ([]byte, error)) (File, error) {
	var raw rawFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return File{}, fmt.Errorf("%w: the file is empty; it needs a pipelines list", ErrConfig)
		}
		if errors.Is(err, ErrConfig) {
			return File{}, err
		}
		// yaml names the line and the unknown key ("line 7: field colour not found in type ...").
		return File{}, fmt.Errorf("%w: %s", ErrConfig, strings.TrimPrefix(cleanYAMLError(err), "yaml: "))
	}
	p := parser{env: env, readFile: readFile}
	f := File{DSN: p.str(raw.DSN), Schema: p.str(raw.Schema)}
	if raw.Operator != nil {
		f.OperatorWebhookURL, f.OperatorWebhookSecret = p.str(raw.Operator.URL), p.str(raw.Operator.Secret)
	}
	if raw.DeliveryLogRetention.set {
		if f.DeliveryLogRetention = p.duration(raw.DeliveryLogRetention, "delivery_log_retention"); f.DeliveryLogRetention == 0 {
			f.DeliveryLogRetention = -1
		}
	}
	if e := raw.Egress; e != nil {
		f.Egress = Egress{SetDenyPrivate: e.DenyPrivate.set, SetHTTPSOnly: e.HTTPSOnly.set, Proxy: p.str(e.Proxy)}
		if e.DenyPrivate.set {
			f.Egress.DenyPrivate = p.boolean(e.DenyPrivate, "egress.deny_private")
		}
		if e.HTTPSOnly.set {
			f.Egress.HTTPSOnly = p.boolean(e.HTTPSOnly, "egress.https_only")
		}
		if e.Allow != nil {
			f.Egress.Allow = []string{}
			for _, a := range e.Allow {
				f.Egress.Allow = append(f.Egress.Allow, p.str(a))
			}
		}
	}
	if raw.OTel != nil {
		f.OTelEndpoint = p.str(raw.OTel.Endpoint)
	}
	if len(raw.Pipelines) == 0 && p.err == nil {
		return f, fmt.Errorf("%w: no pipelines: the file needs `pipelines:` with at least one entry", ErrConfig)
	}
	for _, rp := range raw.Pipelines {
		pl := p.pipeline(rp)
		if p.err != nil {
			return f, p.err
		}
		if err := pl.Validate(); err != nil {
			return f, fmt.Errorf("%w: line %d: %w", ErrConfig, rp.Name.line, err)
		}
		for _, other := range f.Pipelines {
			if other.Name == pl.Name {
				return f, fmt.Errorf("%w: line %d: a second pipeline named %q; names must be unique", ErrConfig, rp.Name.line, pl.Name)
			}
		}
		f.Pipelines = append(f.Pipelines, pl)
	}
	return f, p.err
}

var yamlTypeName = regexp.MustCompile(` in type pipeconf\.\w+`)

// cleanYAMLError turns yaml's type names into the file's words.
func cleanYAMLError(err error) string {
	s := yamlTypeName.ReplaceAllString(err.Error(), "")
	s = strings.ReplaceAll(s, "field ", "unknown key ")
	s = strings.ReplaceAll(s, " not found", "")
	return s
}

// parser converts scalars, keeping the first error.
type parser struct {
	env      Env
	readFile func(string) ([]byte, error)
	err      error
}

func (p *parser) fail(v scalar, format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: line %d: %s", ErrConfig, v.line, fmt.Sprintf(format, args...))
	}
}

// str returns v with ${NAME} replaced; an unset variable is an error.
func (p *parser) str(v scalar) string {
	return envRef.ReplaceAllStringFunc(v.s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		val, ok := p.env(name)
		if !ok {
			p.fail(v, "environment variable %s is not set (set it, or write the value)", name)
		}
		return val
	})
}

func (p *parser) duration(v scalar, key string) time.Duration {
	if !v.set {
		return 0
	}
	s := p.str(v)
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.fail(v, "%s %q: want a duration such as 500ms, 10s or 10m", key, s)
	}
	return d
}

// signedDuration is duration where a negative value means never.
func (p *parser) signedDuration(v scalar, key string) time.Duration {
	if !v.set {
		return 0
	}
	s := p.str(v)
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(v, "%s %q: want a duration such as 120h, or a negative one for never", key, s)
	}
	return d
}

func (p *parser) integer(v scalar, key string, minimum int) int {
	if !v.set {
		return 0
	}
	s := p.str(v)
	n, err := strconv.Atoi(s)
	if err != nil || n < minimum {
		p.fail(v, "%s %q: want a whole number, at least %d", key, s, minimum)
	}
	return n
}

func (p *parser) boolean(v scalar, key string) bool {
	if !v.set {
		return false
	}
	s := p.str(v)
	b, err := strconv.ParseBool(s)
	if err != nil {
		p.fail(v, "%s %q: want true or false", key, s)
	}
	return b
}

// size parses bytes: a number, optionally with B, KiB, MiB, GiB (powers of 1024) or KB, MB,
// GB (powers of 1000).
func (p *parser) size(v scalar, key string) int {
	if !v.set {
		return 0
	}
	s := strings.TrimSpace(p.str(v))
	n, err := ParseSize(s)
	if err != nil {
		p.fail(v, "%s %q: %v", key, s, err)
	}
	return n
}

// ParseSize parses a byte size such as 8192, 512KiB, 32MiB or 1GB.
func ParseSize(s string) (int, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, errors.New("want a size such as 8192, 512KiB or 32MiB")
	}
	return int(n * mult), nil
}

func (p *parser) pipeline(rp rawPipeline) relay.Pipeline {
	pl := relay.Pipeline{
		Name:                 p.str(rp.Name),
		Filter:               strings.TrimSpace(p.str(rp.Filter)),
		Slot:                 p.str(rp.Slot),
		Publication:          p.str(rp.Publication),
		RetryMin:             p.duration(rp.RetryMin, "retry_min"),
		RetryMax:             p.duration(rp.RetryMax, "retry_max"),
		MaxAttempts:          p.integer(rp.MaxAttempts, "max_attempts", -1),
		MaxInFlight:          p.integer(rp.MaxInFlight, "max_in_flight", 0),
		MaxBufferedEvents:    p.integer(rp.MaxBufferedEvents, "max_buffered_events", 0),
		MaxBufferedBytes:     p.size(rp.MaxBufferedBytes, "max_buffered_bytes"),
		RateLimit:            p.integer(rp.RateLimit, "rate_limit", 0),
		Shadow:               p.boolean(rp.Shadow, "shadow"),
		SpillAfter:           p.duration(rp.SpillAfter, "spill_after"),
		SpillSize:            p.integer(rp.SpillSize, "spill_size", 0),
		EndpointDisableAfter: p.signedDuration(rp.DisableAfter, "endpoint_disable_after"),
		Breaker:              p.boolean(rp.Breaker, "breaker"),
		Backlog:              p.boolean(rp.Backlog, "backlog"),
		DeliveryLog:          p.boolean(rp.DeliveryLog, "delivery_log"),
	}
	if !rp.Name.set {
		p.failLine(rp.line(), "a pipeline has no name")
	}
	p.shards(rp, &pl)
	switch initial := p.str(rp.Initial); initial {
	case "", "none":
	case "pending":
		pl.Backfill = true
	default:
		p.fail(rp.Initial, "initial %q: want none (the default) or pending", initial)
	}
	if pl.RetryMin > 0 && pl.RetryMax > 0 && pl.RetryMax < pl.RetryMin {
		p.fail(rp.RetryMax, "retry_max %s is less than retry_min %s", pl.RetryMax, pl.RetryMin)
	}
	on, err := publisher.ParseGoneAction(p.str(rp.OnGone))
	if err != nil {
		p.fail(rp.OnGone, "%v", err)
	}
	pl.OnGone = on
	pl.Delivery = p.delivery(rp)
	p.destination(rp, &pl)
	return pl
}

// line is the pipeline's first line: its name's, else its first other key's.
func (rp rawPipeline) line() int {
	l := rp.Name.line
	vs := []scalar{rp.Filter, rp.Slot, rp.Publication, rp.Format, rp.Shadow, rp.Initial, rp.OnGone, rp.Marks}
	if rp.Webhook != nil {
		vs = append(vs, rp.Webhook.URL, rp.Webhook.Secret, rp.Webhook.SecretFile)
	}
	if rp.NATS != nil {
		vs = append(vs, rp.NATS.URL)
	}
	if rp.Kafka != nil {
		vs = append(vs, rp.Kafka.Brokers)
	}
	for _, v := range vs {
		if v.set && (l == 0 || v.line < l) {
			l = v.line
		}
	}
	return l
}

func (p *parser) failLine(line int, format string, args ...any) {
	p.fail(scalar{line: line}, format, args...)
}

// firstLine is the smallest line among the set values: where a block starts in the file.
func firstLine(fallback int, vs ...scalar) int {
	l := 0
	for _, v := range vs {
		if v.set && (l == 0 || v.line < l) {
			l = v.line
		}
	}
	if l == 0 {
		return fallback
	}
	return l
}

// line is where the nats block starts (its first key), else fallback.
func (n *rawNATS) line(fallback int) int {
	vs := []scalar{n.URL, n.Subject, n.CredsFile, n.RequestTimeout, n.TLS.CA, n.TLS.Cert, n.TLS.Key}
	if s := n.CreateStream; s != nil {
		vs = append(vs, s.Name, s.Replicas, s.MaxAge)
	}
	return firstLine(fallback, vs...)
}

// line is where the kafka block starts (its first key), else fallback.
func (k *rawKafka) line(fallback int) int {
	return firstLine(fallback, k.Brokers, k.Topic, k.Compression, k.RequestTimeout, k.SASL.Mechanism, k.SASL.User,
		k.SASL.Password, k.SASL.PasswordFile, k.TLS.Enabled, k.TLS.CA, k.TLS.Cert, k.TLS.Key)
}

// delivery reads format, source, batch, compression and marks, each checked at its own line.
func (p *parser) delivery(rp rawPipeline) relay.Delivery {
	d := relay.Delivery{
		Format:      webhook.Format(p.str(rp.Format)),
		Source:      p.str(rp.Source),
		Compression: webhook.Compression(p.str(rp.Compression)),
		Marks:       publisher.MarksMode(p.str(rp.Marks)),
	}
	if b := rp.Batch; b != nil {
		d.Batch.MaxEvents = p.integer(b.MaxEvents, "batch.max_events", 0)
		d.Batch.MaxBytes = p.size(b.MaxBytes, "batch.max_bytes")
		// Left out, the publisher's default (settings.BatchLinger, as --batch-linger's); 0 asks
		// for none, as --batch-linger 0 does.
		if b.Linger.set {
			if d.Batch.Linger = p.duration(b.Linger, "batch.linger"); d.Batch.Linger == 0 {
				d.Batch.Linger = publisher.NoLinger
			}
		}
	}
	// Each value alone through Delivery.Validate, so that its error names the right line.
	for _, one := range []struct {
		v scalar
		d relay.Delivery
	}{{rp.Format, relay.Delivery{Format: d.Format}}, {rp.Compression, relay.Delivery{Compression: d.Compression}},
		{rp.Marks, relay.Delivery{Marks: d.Marks}}} {
		if err := one.d.Validate(); err != nil {
			p.fail(one.v, "%v", err)
		}
	}
	if err := d.Validate(); err != nil && p.err == nil {
		p.failLine(rp.line(), "%v", err)
	}
	return d
}

// destination reads exactly one of webhook, nats and kafka into pl.
func (p *parser) destination(rp rawPipeline, pl *relay.Pipeline) {
	type block struct {
		name string
		line int
	}
	var given []block
	if w := rp.Webhook; w != nil {
		given = append(given, block{"webhook", firstLine(rp.line(), w.URL, w.Secret, w.SecretFile, w.SignatureScheme, w.RequestTimeout)})
	}
	if n := rp.NATS; n != nil {
		given = append(given, block{"nats", n.line(rp.line())})
	}
	if k := rp.Kafka; k != nil {
		given = append(given, block{"kafka", k.line(rp.line())})
	}
	if pl.Endpoints = p.boolean(rp.Endpoints, "endpoints"); pl.Endpoints {
		given = append(given, block{"endpoints", rp.Endpoints.line})
	}
	slices.SortStableFunc(given, func(a, b block) int { return a.line - b.line })
	names := make([]string, len(given))
	for i, b := range given {
		names[i] = b.name
	}
	if err := settings.OneDestination(names...); err != nil {
		line := rp.line()
		if len(given) > 1 {
			line = given[1].line
		}
		p.failLine(line, "pipeline %q: %v", pl.Name, err)
		return
	}
	switch {
	case rp.Webhook != nil:
		p.webhook(*rp.Webhook, rp, pl)
		return
	case pl.Endpoints:
		// Each endpoint's row says its URL, secrets and format: the pipeline's request shapes
		// do not apply (relay refuses them at start too).
		if pl.Delivery.Format != webhook.FormatRaw || pl.Delivery.Compression != webhook.CompressionNone || pl.Delivery.Batch.MaxEvents > 1 {
			p.failLine(rp.Endpoints.line, "pipeline %q: with endpoints, each endpoint's row gives its format and every request "+
				"carries one event: drop format, compression and batch", pl.Name)
		}
		return
	}
	// A broker sends one message per event with the webhook contract's headers: the webhook's
	// request shapes do not apply, and relay would refuse them at start. A batch is many
	// messages sent at once.
	if pl.Delivery.Format != webhook.FormatRaw {
		p.fail(rp.Format, "format %s is a webhook setting: %s sends one message per event; drop format", pl.Delivery.Format, given[0].name)
	}
	if pl.Delivery.Compression != webhook.CompressionNone {
		p.fail(rp.Compression, "compression applies to webhook request bodies; for kafka set kafka.compression (nats has none)")
	}
	if n := rp.NATS; n != nil {
		c := natsdest.Config{
			URL:            p.str(n.URL),
			Subject:        p.str(n.Subject),
			CredsFile:      p.str(n.CredsFile),
			TLS:            natsdest.TLSConfig{CA: p.str(n.TLS.CA), Cert: p.str(n.TLS.Cert), Key: p.str(n.TLS.Key)},
			RequestTimeout: p.duration(n.RequestTimeout, "nats.request_timeout"),
		}
		if s := n.CreateStream; s != nil {
			c.CreateStream = &natsdest.StreamConfig{Name: p.str(s.Name), Replicas: p.integer(s.Replicas, "nats.create_stream.replicas", 0),
				MaxAge: p.duration(s.MaxAge, "nats.create_stream.max_age")}
		}
		if err := c.Validate(); err != nil {
			p.failLine(n.line(rp.line()), "%v", err)
		}
		pl.Destination = c
		return
	}
	k := rp.Kafka
	c := kafkadest.Config{
		Brokers: p.str(k.Brokers),
		Topic:   p.str(k.Topic),
		SASL: kafkadest.SASLConfig{Mechanism: p.str(k.SASL.Mechanism), User: p.str(k.SASL.User),
			Password: p.str(k.SASL.Password), PasswordFile: p.str(k.SASL.PasswordFile)},
		TLS: kafkadest.TLSConfig{Enabled: p.boolean(k.TLS.Enabled, "kafka.tls.enabled"), CA: p.str(k.TLS.CA),
			Cert: p.str(k.TLS.Cert), Key: p.str(k.TLS.Key)},
		Compression:    p.str(k.Compression),
		RequestTimeout: p.duration(k.RequestTimeout, "kafka.request_timeout"),
	}
	if err := c.Validate(); err != nil {
		p.failLine(k.line(rp.line()), "%v", err)
	}
	pl.Destination = c
}

// webhook reads the webhook block: url, secret(s), scheme and request timeout.
func (p *parser) webhook(w rawWebhook, rp rawPipeline, pl *relay.Pipeline) {
	pl.WebhookURL = p.str(w.URL)
	pl.RequestTimeout = p.duration(w.RequestTimeout, "request_timeout")
	if !w.URL.set {
		p.fail(rp.Name, "pipeline %q has no webhook url", pl.Name)
	} else if _, err := webhook.ParseURL(pl.WebhookURL); err != nil {
		p.fail(w.URL, "%v", err)
	}
	scheme, err := signature.ParseScheme(p.str(w.SignatureScheme))
	if err != nil {
		p.fail(w.SignatureScheme, "%v", err)
	}
	pl.Scheme = scheme
	switch {
	case w.Secret.set && w.SecretFile.set:
		p.fail(w.SecretFile, "give secret or secret_file, not both")
	case w.Secret.set:
		pl.Secrets = splitSecrets(p.str(w.Secret))
	case w.SecretFile.set:
		path := p.str(w.SecretFile)
		b, err := p.readFile(path)
		if err != nil {
			p.fail(w.SecretFile, "secret_file: %v", err)
		}
		pl.Secrets = splitSecrets(string(b))
	default:
		p.fail(rp.Name, "pipeline %q has no webhook secret: set secret or secret_file", pl.Name)
	}
	if p.err == nil {
		if _, err := signature.Keys(pl.Scheme, pl.Secrets); err != nil {
			p.fail(w.Secret, "pipeline %q: %v", pl.Name, err)
		}
	}
}

// shards reads shards (how many) and shard (the one this process runs, 0-based).
func (p *parser) shards(rp rawPipeline, pl *relay.Pipeline) {
	pl.Shards = p.integer(rp.Shards, "shards", 1)
	if pl.Shards > relay.MaxShards {
		p.fail(rp.Shards, "shards %d: at most %d", pl.Shards, relay.MaxShards)
	}
	if rp.Shard.set {
		i := p.integer(rp.Shard, "shard", 0)
		if i >= max(pl.Shards, 1) {
			p.fail(rp.Shard, "shard %d does not exist: with shards %d, shard is 0 to %d", i, max(pl.Shards, 1), max(pl.Shards, 1)-1)
		}
		pl.Shard = &i
	}
}

// splitSecrets splits at commas and line ends and trims blanks: several secrets are a rotation.
func splitSecrets(raw string) []string {
	var out []string
	for _, s := range strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
