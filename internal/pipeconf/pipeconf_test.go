package pipeconf

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

func env(vars map[string]string) Env {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func files(m map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		v, ok := m[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return []byte(v), nil
	}
}

const example = `dsn: ${DB_DSN}                       # optional; --dsn / DB_DSN override
pipelines:
  - name: warehouse                  # [a-z0-9_]{1,40}, unique
    filter: "event_type LIKE 'order.%'"
    webhook:
      url: https://warehouse.internal/webhooks
      secret: ${WAREHOUSE_SECRET}
      signature_scheme: x-signature
      request_timeout: 10s
    retry_min: 1s
    retry_max: 10m
    max_attempts: 0
    max_in_flight: 64
    max_buffered_events: 8192
    max_buffered_bytes: 32MiB
    rate_limit: 0
  - name: billing_shadow
    filter: "aggregate_type = 'invoice'"
    shadow: true
    initial: pending
    webhook: { url: https://billing-test.internal/hook, secret_file: /run/secrets/billing }
`

func TestParseTheIssueExample(t *testing.T) {
	f, err := Parse([]byte(example), env(map[string]string{"DB_DSN": "postgres://db/app", "WAREHOUSE_SECRET": "s1"}),
		files(map[string]string{"/run/secrets/billing": "new\nold\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if f.DSN != "postgres://db/app" || len(f.Pipelines) != 2 {
		t.Fatalf("got %+v", f)
	}
	w := f.Pipelines[0]
	want := relay.Pipeline{Name: "warehouse", Filter: "event_type LIKE 'order.%'", WebhookURL: "https://warehouse.internal/webhooks",
		Secrets: []string{"s1"}, Scheme: signature.XSignature, RequestTimeout: 10 * time.Second, RetryMin: time.Second,
		RetryMax: 10 * time.Minute, MaxInFlight: 64, MaxBufferedEvents: 8192, MaxBufferedBytes: 32 << 20}
	if !equal(w, want) {
		t.Fatalf("warehouse = %+v, want %+v", w, want)
	}
	b := f.Pipelines[1]
	if !b.Shadow || !b.Backfill || strings.Join(b.Secrets, ",") != "new,old" || b.Filter != "aggregate_type = 'invoice'" {
		t.Fatalf("billing_shadow = %+v", b)
	}
}

func equal(a, b relay.Pipeline) bool {
	return a.Name == b.Name && a.Filter == b.Filter && a.WebhookURL == b.WebhookURL && strings.Join(a.Secrets, ",") == strings.Join(b.Secrets, ",") &&
		a.Scheme == b.Scheme && a.RequestTimeout == b.RequestTimeout && a.RetryMin == b.RetryMin && a.RetryMax == b.RetryMax &&
		a.MaxAttempts == b.MaxAttempts && a.MaxInFlight == b.MaxInFlight && a.MaxBufferedEvents == b.MaxBufferedEvents &&
		a.MaxBufferedBytes == b.MaxBufferedBytes && a.RateLimit == b.RateLimit && a.Shadow == b.Shadow && a.Backfill == b.Backfill
}

func TestParseErrorsNameTheFix(t *testing.T) {
	const head = "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", head + "    colour: red\n", "line 4: unknown key colour"},
		{"unknown webhook key", "pipelines:\n  - name: a\n    webhook:\n      url: http://localhost/h\n      secret: s\n      sekret: x\n", "line 6: unknown key sekret"},
		{"unknown top key", "dns: x\n" + head, "line 1: unknown key dns"},
		{"unset variable", "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: '${NOPE}'}\n", "line 3: environment variable NOPE is not set"},
		{"bad duration", head + "    retry_min: soon\n", `line 4: retry_min "soon"`},
		{"bad size", head + "    max_buffered_bytes: 32 parsecs\n", `line 4: max_buffered_bytes "32 parsecs"`},
		{"bad name", "pipelines:\n  - name: Warehouse!\n    webhook: {url: http://localhost/h, secret: s}\n", "line 2: invalid pipeline: name"},
		{"duplicate", head + "  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n", `line 4: a second pipeline named "a"`},
		{"no secret", "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h}\n", "no webhook secret"},
		{"no url", "pipelines:\n  - name: a\n    webhook: {secret: s}\n", "no webhook url"},
		{"bad url", "pipelines:\n  - name: a\n    webhook: {url: 'ftp://x', secret: s}\n", "line 3:"},
		{"initial", head + "    initial: everything\n", `line 4: initial "everything": want none (the default) or pending`},
		{"list value", head + "    filter: [a, b]\n", "line 4: expected a single value"},
		{"no pipelines", "dsn: x\n", "no pipelines"},
		{"empty", "", "the file is empty"},
		{"shadow forever", head + "    shadow: true\n    max_attempts: -1\n", "cannot retry forever"},
		{"secret and file", "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s, secret_file: /x}\n", "not both"},
		{"missing secret file", "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret_file: /nope}\n", "secret_file:"},
		{"not yaml", "pipelines: [\n", "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil), files(nil))
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// brokers is docs/guides/brokers.md's example of the per-pipeline keys added with broker destinations,
// formats and batching, and on_gone.
const brokers = `pipelines:
  - name: events_ce
    webhook: { url: https://ce.internal/hook, secret: s }
    format: cloudevents
    source: ${CE_SOURCE}
    batch: { max_events: 100, max_bytes: 1MiB, linger: 20ms }
    compression: gzip
    marks: "off"
    on_gone: retry
  - name: stream
    filter: "aggregate_type = 'order'"
    nats:
      url: nats://n1:4222,nats://${NATS_HOST}:4222
      subject: orders.{aggregate_type}.{event_type}
      creds_file: /run/secrets/nats.creds
      tls: { ca: "${NATS_CA}", cert: /tls/c.pem, key: /tls/k.pem }
      request_timeout: 5s
      create_stream: { name: "${STREAM}", replicas: 3, max_age: 168h }
    marks: done
  - name: log
    kafka:
      brokers: k1:9092,k2:9092
      topic: outbox.event.{aggregate_type}
      sasl: { mechanism: scram-sha-512, user: relay, password: "${KAFKA_PASSWORD}" }
      tls: { enabled: true, ca: /tls/ca.pem }
      compression: zstd
      request_timeout: 15s
    on_gone: pause
`

var brokersEnv = map[string]string{"CE_SOURCE": "/shop/orders", "NATS_HOST": "n2", "NATS_CA": "/tls/ca.pem",
	"STREAM": "OUTBOX", "KAFKA_PASSWORD": "pw"}

func TestParseDestinationsFormatsAndOnGone(t *testing.T) {
	f, err := Parse([]byte(brokers), env(brokersEnv), files(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Pipelines) != 3 {
		t.Fatalf("got %d pipelines", len(f.Pipelines))
	}
	ce, st, lg := f.Pipelines[0], f.Pipelines[1], f.Pipelines[2]

	wantD := relay.Delivery{Format: webhook.FormatCloudEvents, Source: "/shop/orders",
		Batch:       publisher.Batch{MaxEvents: 100, MaxBytes: 1 << 20, Linger: 20 * time.Millisecond},
		Compression: webhook.CompressionGzip, Marks: publisher.MarksOff}
	if ce.Delivery != wantD || ce.OnGone != publisher.GoneRetry || ce.WebhookURL != "https://ce.internal/hook" ||
		ce.Destination != nil {
		t.Fatalf("events_ce = %+v", ce)
	}

	wantN := natsdest.Config{URL: "nats://n1:4222,nats://n2:4222", Subject: "orders.{aggregate_type}.{event_type}",
		CredsFile: "/run/secrets/nats.creds", TLS: natsdest.TLSConfig{CA: "/tls/ca.pem", Cert: "/tls/c.pem", Key: "/tls/k.pem"},
		RequestTimeout: 5 * time.Second}
	n, ok := st.Destination.(natsdest.Config)
	if !ok || n.CreateStream == nil || *n.CreateStream != (natsdest.StreamConfig{Name: "OUTBOX", Replicas: 3, MaxAge: 168 * time.Hour}) {
		t.Fatalf("stream's nats = %+v", n)
	}
	if m := n; func() bool { m.CreateStream = nil; return m != wantN }() {
		t.Fatalf("stream's nats = %+v, want %+v", m, wantN)
	}
	if st.WebhookURL != "" || st.OnGone != publisher.GonePause ||
		st.Delivery != (relay.Delivery{Format: webhook.FormatRaw, Compression: webhook.CompressionNone, Marks: publisher.MarksDone}) {
		t.Fatalf("stream = %+v", st)
	}

	wantK := kafkadest.Config{Brokers: "k1:9092,k2:9092", Topic: "outbox.event.{aggregate_type}",
		SASL: kafkadest.SASLConfig{Mechanism: "scram-sha-512", User: "relay", Password: "pw"},
		TLS:  kafkadest.TLSConfig{Enabled: true, CA: "/tls/ca.pem"}, Compression: "zstd", RequestTimeout: 15 * time.Second}
	if k, ok := lg.Destination.(kafkadest.Config); !ok || k != wantK || lg.WebhookURL != "" {
		t.Fatalf("log's kafka = %+v, want %+v", k, wantK)
	}
	for _, p := range f.Pipelines {
		if err := p.Validate(); err != nil {
			t.Errorf("relay refuses %s: %v", p.Name, err)
		}
	}
}

// Left out, the new keys keep relay's zero values (a batch's linger 0 is the publisher's
// default, that of --batch-linger); linger: 0s asks for none, as --batch-linger 0 does.
func TestParseNewKeysDefaults(t *testing.T) {
	f, err := Parse([]byte("pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"+
		"  - name: b\n    webhook: {url: http://localhost/h, secret: s}\n    batch: {max_events: 10}\n"), env(nil), files(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Pipelines[0], f.Pipelines[1]
	if a.OnGone != publisher.GonePause || a.Delivery.Batch != (publisher.Batch{}) || a.Delivery.Format != webhook.FormatRaw ||
		a.Delivery.Marks != publisher.MarksDone || a.Delivery.Compression != webhook.CompressionNone || a.Delivery.Source != "" {
		t.Fatalf("a = %+v", a)
	}
	if b.Delivery.Batch != (publisher.Batch{MaxEvents: 10}) { // Linger 0: the publisher's 5ms
		t.Fatalf("b's batch = %+v", b.Delivery.Batch)
	}
	f, err = Parse([]byte("pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n    batch: {max_events: 10, linger: 0s}\n"), env(nil), files(nil))
	if err != nil || f.Pipelines[0].Delivery.Batch.Linger != publisher.NoLinger {
		t.Fatalf("linger: 0s gave %+v, %v", f.Pipelines, err)
	}
}

// A broker pipeline takes batch: many messages sent at once, each acknowledged on its own.
func TestParseBatchOnABroker(t *testing.T) {
	const y = "pipelines:\n  - name: a\n    nats:\n      url: nats://localhost:4222\n    batch:\n      max_events: 100\n      linger: 5ms\n"
	cfg, err := Parse([]byte(y), env(nil), files(nil))
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Pipelines[0].Delivery.Batch; b.MaxEvents != 100 || b.Linger != 5*time.Millisecond {
		t.Fatalf("batch = %+v, want 100 events, 5ms", b)
	}
}

func TestParseNewKeysErrors(t *testing.T) {
	const hook = "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"
	const nats = "pipelines:\n  - name: a\n    nats:\n      url: nats://localhost:4222\n"
	const kafka = "pipelines:\n  - name: a\n    kafka:\n      brokers: localhost:9092\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"webhook and nats", hook + "    nats: {url: nats://localhost:4222}\n", `line 4: pipeline "a": both webhook and nats are set: a pipeline has exactly one destination (webhook, nats, kafka or endpoints); drop one`},
		{"nats and kafka", nats + "    kafka:\n      brokers: localhost:9092\n", `line 6: pipeline "a": both nats and kafka are set`},
		{"all three", hook + "    kafka: {brokers: x:1}\n    nats: {url: nats://x}\n", `line 4: pipeline "a": both webhook and kafka are set`},
		{"no name", "pipelines:\n  - filter: x\n    nats: {url: nats://x}\n", "line 2: a pipeline has no name"},
		{"no destination", "pipelines:\n  - name: a\n    filter: x\n", `line 2: pipeline "a": a pipeline has exactly one destination (webhook, nats, kafka or endpoints), and none is set: give webhook (url and secret), nats, kafka or endpoints: true`},
		{"unknown nats key", nats + "      subjekt: x\n", "line 5: unknown key subjekt"},
		{"unknown nats tls key", nats + "      tls: {ca: a, crt: b}\n", "line 5: unknown key crt"},
		{"unknown create_stream key", nats + "      create_stream: {name: S, replica: 3}\n", "line 5: unknown key replica"},
		{"unknown kafka key", kafka + "      acks: all\n", "line 5: unknown key acks"},
		{"unknown sasl key", kafka + "      sasl:\n        mechanism: plain\n        username: u\n", "line 7: unknown key username"},
		{"unknown batch key", hook + "    batch: {max_events: 2, max_size: 1}\n", "line 4: unknown key max_size"},
		{"nats unset variable", nats + "      tls:\n        ca: ${NATS_CA}\n", "line 6: environment variable NATS_CA is not set"},
		{"create_stream unset variable", nats + "      create_stream:\n        name: ${STREAM}\n", "line 6: environment variable STREAM is not set"},
		{"kafka unset variable", kafka + "      sasl: {mechanism: plain, user: u, password: '${KAFKA_PASSWORD}'}\n", "line 5: environment variable KAFKA_PASSWORD is not set"},
		{"batch unset variable", hook + "    batch:\n      max_events: ${BATCH}\n", "line 5: environment variable BATCH is not set"},
		{"nats no url", "pipelines:\n  - name: a\n    nats:\n      subject: x.y\n", "line 4: nats: no server URL"},
		{"nats bad url", "pipelines:\n  - name: a\n    nats: {url: 'http://localhost:4222'}\n", `line 3: nats: server "http://localhost:4222" has scheme "http"`},
		{"nats bad timeout", nats + "      request_timeout: soon\n", `line 5: nats.request_timeout "soon"`},
		{"nats bad replicas", nats + "      create_stream: {name: S, replicas: x}\n", `line 5: nats.create_stream.replicas "x"`},
		{"nats too many replicas", nats + "      create_stream: {name: S, replicas: 7}\n", "line 4: nats: create_stream.replicas is 7"},
		{"nats cert without key", nats + "      tls: {cert: c.pem}\n", "nats: tls.cert and tls.key go together"},
		{"kafka no brokers", "pipelines:\n  - name: a\n    kafka: {topic: t}\n", "line 3: kafka: no brokers"},
		{"kafka sasl", kafka + "      sasl: {mechanism: plain}\n", "line 4: kafka: sasl needs a user"},
		{"kafka tls enabled", kafka + "      tls: {enabled: maybe}\n", `line 5: kafka.tls.enabled "maybe": want true or false`},
		{"kafka compression", kafka + "      compression: brotli\n", "line 4: kafka:"},
		{"kafka list value", kafka + "      topic: [a, b]\n", "line 5: expected a single value"},
		{"format", hook + "    format: json\n", `line 4: unknown format "json": use raw or cloudevents`},
		{"compression", hook + "    compression: br\n", `line 4: unknown compression "br": use none or gzip`},
		{"marks", hook + "    marks: maybe\n", `line 4: unknown marks mode "maybe": use done or off`},
		{"on_gone", hook + "    on_gone: ignore\n", `line 4: on_gone "ignore": use pause or retry`},
		{"batch max_events", hook + "    batch:\n      max_events: -2\n", `line 5: batch.max_events "-2"`},
		{"batch max_bytes", hook + "    batch:\n      max_events: 2\n      max_bytes: lots\n", `line 6: batch.max_bytes "lots"`},
		{"batch linger", hook + "    batch:\n      linger: -5ms\n", `line 5: batch.linger "-5ms"`},
		{"batch as a value", hook + "    batch: 100\n", "line 4:"},
		{"format on a broker", nats + "    format: cloudevents\n", "line 5: format cloudevents is a webhook setting: nats sends one message per event"},
		{"compression on a broker", kafka + "    compression: gzip\n", "line 5: compression applies to webhook request bodies; for kafka set kafka.compression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil), files(nil))
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int{"8192": 8192, "512KiB": 512 << 10, "32MiB": 32 << 20, "1GiB": 1 << 30, "2MB": 2e6, "10B": 10, "32 MiB": 32 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "MiB", "1.5MiB", "1TiB", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

// Any input either parses into pipelines that pass relay's own validation, or fails with
// ErrConfig; it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"))
	f.Add([]byte("pipelines: [\n"))
	f.Add([]byte("dsn: ${X}\npipelines: []\n"))
	f.Add([]byte(brokers))
	f.Add([]byte("pipelines:\n  - name: a\n    nats: {url: 'nats://${NATS_HOST}:4222', create_stream: {name: S}}\n    on_gone: retry\n"))
	f.Add([]byte("pipelines:\n  - name: a\n    kafka: {brokers: 'x:1', sasl: {mechanism: plain, user: u, password_file: /p}}\n"))
	f.Add([]byte("pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n    nats: {url: nats://x}\n"))
	f.Add([]byte("pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n    format: cloudevents\n    batch: {max_events: 5, max_bytes: 64KiB}\n    marks: off\n"))
	vars := map[string]string{"DB_DSN": "d", "WAREHOUSE_SECRET": "s"}
	for k, v := range brokersEnv {
		vars[k] = v
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b, env(vars), files(map[string]string{"/run/secrets/billing": "x"}))
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if len(file.Pipelines) == 0 {
			t.Fatal("parsed with no pipelines")
		}
		for _, p := range file.Pipelines {
			if err := p.Validate(); err != nil {
				t.Fatalf("parsed an invalid pipeline: %v", err)
			}
			if d := p.Delivery; d.Validate() != nil || d != p.Delivery {
				t.Fatalf("parsed delivery %+v that Validate refuses or changes", p.Delivery)
			}
			if n, ok := p.Destination.(natsdest.Config); ok && n.Validate() != nil {
				t.Fatalf("parsed nats %+v that Validate refuses", n)
			}
			if k, ok := p.Destination.(kafkadest.Config); ok && k.Validate() != nil {
				t.Fatalf("parsed kafka %+v that Validate refuses", k)
			}
		}
	})
}

func TestParseShards(t *testing.T) {
	const head = "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"
	f, err := Parse([]byte(head+"    shards: 4\n    shard: ${POD}\n"), env(map[string]string{"POD": "3"}), files(nil))
	if err != nil {
		t.Fatal(err)
	}
	if p := f.Pipelines[0]; p.Shards != 4 || p.Shard == nil || *p.Shard != 3 {
		t.Fatalf("shards %d shard %v, want 4 and 3", p.Shards, p.Shard)
	}
	f, err = Parse([]byte(head+"    shards: 2\n"), env(nil), files(nil))
	if err != nil || f.Pipelines[0].Shard != nil {
		t.Fatalf("without shard: err %v, shard %v; want every shard (nil)", err, f.Pipelines[0].Shard)
	}
	for _, tc := range []struct{ yaml, want string }{
		{head + "    shards: 0\n", `line 4: shards "0": want a whole number, at least 1`},
		{head + "    shards: 1000\n", "line 4: shards 1000: at most 256"},
		{head + "    shards: 4\n    shard: 4\n", "line 5: shard 4 does not exist: with shards 4, shard is 0 to 3"},
		{head + "    shard: 1\n", "line 4: shard 1 does not exist: with shards 1, shard is 0 to 0"},
	} {
		if _, err := Parse([]byte(tc.yaml), env(nil), files(nil)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// schema: names the schema of the relay's tables, ${NAME} included; none leaves it empty
// (the connection's current_schema()).
func TestParseSchema(t *testing.T) {
	const pipes = "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"
	f, err := Parse([]byte("schema: ${OUTBOX_SCHEMA}\n"+pipes), env(map[string]string{"OUTBOX_SCHEMA": "app"}), files(nil))
	if err != nil || f.Schema != "app" {
		t.Fatalf("schema: ${OUTBOX_SCHEMA} gave %q, %v; want app", f.Schema, err)
	}
	if f, err := Parse([]byte(pipes), env(nil), files(nil)); err != nil || f.Schema != "" {
		t.Fatalf("no schema: gave %q, %v", f.Schema, err)
	}
}

// The egress section at the file's top: each key read with ${NAME}, and whether it is set.
func TestParseEgress(t *testing.T) {
	env := func(name string) (string, bool) {
		return map[string]string{"PROXY": "http://u:p@proxy:3128"}[name], name == "PROXY"
	}
	f, err := Parse([]byte("egress:\n  deny_private: true\n  allow: [10.20.0.0/16, 192.168.7.0/24]\n  proxy: ${PROXY}\n"+
		"pipelines:\n  - name: p\n    endpoints: true\n"), env, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	e := f.Egress
	if !e.SetDenyPrivate || !e.DenyPrivate || e.SetHTTPSOnly || len(e.Allow) != 2 || e.Allow[1] != "192.168.7.0/24" || e.Proxy != "http://u:p@proxy:3128" {
		t.Fatalf("egress: %+v", e)
	}
	if _, err := Parse([]byte("egress:\n  deny_privat: true\npipelines:\n  - name: p\n    endpoints: true\n"), env, os.ReadFile); err == nil ||
		!strings.Contains(err.Error(), "deny_privat") {
		t.Fatalf("an unknown egress key: %v", err)
	}
}

// otel at the file's top: the OTLP receiver of the relay's traces, read with ${NAME}.
func TestParseOTel(t *testing.T) {
	const pipes = "pipelines:\n  - name: a\n    webhook: {url: http://localhost/h, secret: s}\n"
	f, err := Parse([]byte("otel: {endpoint: '${COLLECTOR}'}\n"+pipes), env(map[string]string{"COLLECTOR": "http://otel:4318"}), files(nil))
	if err != nil || f.OTelEndpoint != "http://otel:4318" {
		t.Fatalf("otel.endpoint: ${COLLECTOR} gave %q, %v; want http://otel:4318", f.OTelEndpoint, err)
	}
	if f, err := Parse([]byte(pipes), env(nil), files(nil)); err != nil || f.OTelEndpoint != "" {
		t.Fatalf("no otel: gave %q, %v", f.OTelEndpoint, err)
	}
	if _, err := Parse([]byte("otel: {endpont: http://otel:4318}\n"+pipes), env(nil), files(nil)); err == nil ||
		!strings.Contains(err.Error(), "endpont") {
		t.Fatalf("an unknown otel key: %v", err)
	}
}
