package pipeconf

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b, env(map[string]string{"DB_DSN": "d", "WAREHOUSE_SECRET": "s"}), files(map[string]string{"/run/secrets/billing": "x"}))
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
