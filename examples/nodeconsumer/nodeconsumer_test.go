// Package nodeconsumer_test runs consumer.mjs, the Node.js consumer of
// docs/guides/consuming-without-go.md, against a live relay: the official Standard Webhooks
// library verifies every delivery and the official CloudEvents SDK reads it, with nothing of
// this module on the consumer's side.
package nodeconsumer_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/internal/fetch"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// secret is the Standard Webhooks spec's example secret.
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// nodeModules installs package-lock.json's packages once into the cache (keyed by the lock
// file's hash) and returns the directory holding node_modules.
func nodeModules(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found on PATH: this test runs consumer.mjs with Node.js; install it (apt-get install -y nodejs npm)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm not found on PATH: this test installs the standardwebhooks and cloudevents packages with npm " +
			"from the npm registry; install it (apt-get install -y npm)")
	}
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(fetch.CacheDir(), "node-consumer", hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks", "package.json")); err == nil {
		return dir
	}
	// Install beside the cache entry, then rename: a run that stops half-way leaves no entry
	// that looks complete.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (standardwebhooks, cloudevents from the npm registry): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, statErr := os.Stat(dir); statErr != nil { // another run may have won the race
			t.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "nodeconsumer: installed standardwebhooks and cloudevents into %s\n", dir)
	return dir
}

// consumer is consumer.mjs running: what it accepted, by event id, and what it rejected.
type consumer struct {
	url      string
	mu       sync.Mutex
	accepted map[string]map[string]any
	rejected []string
}

func (c *consumer) counts() (accepted, rejected int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.accepted), len(c.rejected)
}

// startConsumer runs consumer.mjs with the cached node_modules and reads its lines until it
// exits; the test's cleanup stops it and waits.
func startConsumer(t *testing.T, modules string) *consumer {
	t.Helper()
	script, err := filepath.Abs("consumer.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// ES modules resolve packages from the script's directory upwards, so the script runs from a
	// copy beside the cached node_modules.
	run := filepath.Join(t.TempDir(), "consumer.mjs")
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(run, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(filepath.Dir(run), "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(run), "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", run)
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret, "PORT=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &consumer{accepted: map[string]map[string]any{}}
	listening := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Errorf("consumer.mjs printed %q: %v", sc.Text(), err)
				continue
			}
			c.mu.Lock()
			switch {
			case line["listening"] != nil:
				listening <- int(line["listening"].(float64))
			case line["rejected"] != nil:
				c.rejected = append(c.rejected, fmt.Sprint(line["rejected"]))
			default:
				c.accepted[fmt.Sprint(line["id"])] = line
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
	select {
	case port := <-listening:
		c.url = fmt.Sprintf("http://127.0.0.1:%d/webhook", port)
	case <-time.After(30 * time.Second):
		t.Fatal("consumer.mjs did not print its port within 30s")
	}
	return c
}

// The Node consumer of the docs verifies and reads every event a relay delivers, in the raw
// format and as CloudEvents, and refuses a request whose signature is wrong.
func TestNodeConsumerVerifiesAndReadsALiveRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test installs npm packages and runs node, PostgreSQL and a relay")
	}
	modules := nodeModules(t)
	for _, format := range []webhook.Format{webhook.FormatRaw, webhook.FormatCloudEvents} {
		t.Run(string(format), func(t *testing.T) {
			c := startConsumer(t, modules)

			// The negative control first: a delivery signed with another secret is refused.
			forged, err := signature.Keys(signature.StandardWebhooks, []string{"whsec_" + "c2Vjb25kLXNlY3JldC1rZXktZm9yLXJvdGF0aW9u"})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().Unix()
			req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(`{"n":0}`))
			req.Header.Set("webhook-id", "msg_forged")
			req.Header.Set("webhook-timestamp", fmt.Sprint(now))
			req.Header.Set("webhook-signature", string(signature.AppendStandard(nil, forged, "msg_forged", now, []byte(`{"n":0}`))))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a forged signature got %d, want 401", resp.StatusCode)
			}

			dsn, pool := relaytest.MigratedDB(t)
			ctx := context.Background()
			const events = 20
			ids := map[string]int{}
			for i := range events {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					id, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order",
						AggregateID: fmt.Sprint(i % 4), EventType: "order.created", Payload: map[string]int{"n": i}})
					ids[id.String()] = i
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			runRelay(t, relay.Config{DSN: dsn, WebhookURL: c.url, Secrets: []string{secret},
				Scheme: signature.StandardWebhooks, Delivery: relay.Delivery{Format: format},
				RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond, RequestTimeout: 5 * time.Second,
				Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), Registerer: prometheus.NewRegistry()})
			relaytest.WaitFor(t, 60*time.Second, "consumer.mjs accepted every event", func() bool {
				n, _ := c.counts()
				return n >= events
			})
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.rejected) != 1 {
				t.Fatalf("consumer.mjs rejected %d requests (%q), want only the forged one", len(c.rejected), c.rejected)
			}
			for id, n := range ids {
				got, ok := c.accepted[id]
				if !ok {
					t.Fatalf("event %s (n=%d) not accepted", id, n)
				}
				data, _ := json.Marshal(got["data"])
				if got["type"] != "order.created" || got["subject"] != fmt.Sprintf("order/%d", n%4) || !bytes.Equal(data, []byte(fmt.Sprintf(`{"n":%d}`, n))) {
					t.Fatalf("event %s read as %v, want order.created, order/%d, {\"n\":%d}", id, got, n%4, n)
				}
				if format == webhook.FormatCloudEvents && got["sequence"] == nil {
					t.Fatalf("CloudEvent %s has no sequence extension: %v", id, got)
				}
			}
		})
	}
}

// runRelay runs the relay until the test ends, and fails the test if it stops with an error.
func runRelay(t *testing.T, cfg relay.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// The page shows consumer.mjs as it is: the copy a reader pastes is the one tested above.
func TestDocsPageShowsThisConsumer(t *testing.T) {
	page, err := os.ReadFile("../../docs/guides/consuming-without-go.md")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("consumer.mjs")
	if err != nil {
		t.Fatal(err)
	}
	block := "```js\n" + strings.TrimRight(string(script), "\n") + "\n```"
	if !strings.Contains(string(page), block) {
		t.Fatal("docs/guides/consuming-without-go.md does not show examples/nodeconsumer/consumer.mjs as it is: copy the file into its ```js block")
	}
}
