package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxyChild marks the child process that runs the proxy test: net/http reads the proxy
// variables once per process, so they are set in a fresh one before any client exists.
const proxyChild = "PUBLISHER_PROXY_TEST_CHILD"

// With HTTP_PROXY set, a webhook goes through the proxy (a real forward proxy that sees the
// absolute URL), signed, and the receiver's status and Retry-After come back through it. The
// webhook host does not resolve: only the proxy can reach it, so a direct dial would fail.
func TestWebhookGoesThroughTheEnvironmentsHTTPProxy(t *testing.T) {
	if os.Getenv(proxyChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWebhookGoesThroughTheEnvironmentsHTTPProxy$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), proxyChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWebhookGoesThroughTheEnvironmentsHTTPProxy") {
			t.Fatalf("child test: %v\n%s", err, out)
		}
		return
	}

	var mu sync.Mutex
	var seen []*http.Request // as the receiver got them
	var proxied []string     // absolute URLs the proxy forwarded
	fail := false
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
		if fail {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer receiver.Close()
	direct := &http.Transport{} // Proxy nil: the proxy itself connects directly
	defer direct.CloseIdleConnections()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() || r.URL.Host != "receiver.test" {
			http.Error(w, "not a proxy request for receiver.test: "+r.URL.String(), http.StatusBadGateway)
			return
		}
		mu.Lock()
		proxied = append(proxied, r.URL.String())
		mu.Unlock()
		out, err := http.NewRequestWithContext(r.Context(), r.Method, receiver.URL+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		out.Host = r.Host
		resp, err := direct.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	for _, k := range []string{"http_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"} {
		os.Unsetenv(k)
	}
	os.Setenv("HTTP_PROXY", proxy.URL)

	w, err := New(Config{URL: "http://receiver.test/hooks/in?tenant=a", Secrets: []string{"s"}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.client == nil {
		t.Fatal("HTTP_PROXY is set but the webhook uses the lean direct client")
	}
	ctx := context.Background()
	if o := w.Send(ctx, testEvent(), 1); !o.Delivered {
		t.Fatalf("delivery through the proxy: status %d, %v", o.Status, o.Err)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	o := w.Send(ctx, testEvent(), 2)
	if o.Status != http.StatusServiceUnavailable || o.RetryAfter != 7*time.Second || o.Delivered {
		t.Fatalf("a 503 with Retry-After: 7 through the proxy came back as status %d, Retry-After %s, err %v",
			o.Status, o.RetryAfter, o.Err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(proxied) != 2 || proxied[0] != "http://receiver.test/hooks/in?tenant=a" {
		t.Fatalf("the proxy forwarded %q, want the webhook URL twice", proxied)
	}
	r := seen[0]
	if r.Host != "receiver.test" || r.Header.Get("X-Event-Id") != testEvent().ID || r.Header.Get("X-Signature") == "" ||
		r.Header.Get("X-Attempt") != "1" {
		t.Fatalf("the receiver got Host %q and headers %v", r.Host, r.Header)
	}
}
