package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
)

func testEvent() *envelope.Message {
	return &envelope.Message{ID: "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70", AggregateType: "order", AggregateID: "42",
		EventType: "order.created", Payload: []byte(`{"order_id":42}`), Sequence: envelope.Sequence(7, 0)}
}

// The lean client sends what net/http would: the path and query, Host, the body and every
// header, and reuses one connection.
func TestRawClientRequestAndReuse(t *testing.T) {
	var conns atomic.Int32
	var got *http.Request
	var body []byte
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		body, _ = io.ReadAll(r.Body)
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(strings.Repeat("x", 10000))) // a body to drain
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	w, err := New(Config{URL: srv.URL + "/hooks/in?tenant=a", Secrets: []string{"s"}, UserAgent: "outbox-relay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if w.raw == nil {
		t.Fatal("direct URL did not get the lean client")
	}
	for i := 1; i <= 3; i++ {
		o := w.Send(context.Background(), testEvent(), i)
		if !o.Delivered || o.Status != http.StatusAccepted || o.RetryAfter != 3*time.Second {
			t.Fatalf("attempt %d: %+v", i, o)
		}
	}
	if got.URL.RequestURI() != "/hooks/in?tenant=a" || got.Method != http.MethodPost || got.Host != strings.TrimPrefix(srv.URL, "http://") {
		t.Fatalf("request %s %s host %s", got.Method, got.URL, got.Host)
	}
	if string(body) != `{"order_id":42}` || got.Header.Get("X-Attempt") != "3" || got.Header.Get("User-Agent") != "outbox-relay/test" ||
		!strings.HasPrefix(got.Header.Get("X-Signature"), "sha256=") || got.ContentLength != int64(len(body)) {
		t.Fatalf("body %q headers %v", body, got.Header)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 3 requests, want 1 kept alive", n)
	}
}

// A kept-alive connection the server closed while idle is retried on a new one, without
// costing the event an attempt.
func TestRawClientRetriesAStaleConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	w, _ := New(Config{URL: srv.URL, Secrets: []string{"s"}})
	if o := w.Send(context.Background(), testEvent(), 1); !o.Delivered {
		t.Fatalf("first: %+v", o)
	}
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if o := w.Send(context.Background(), testEvent(), 2); !o.Delivered {
		t.Fatalf("after the server closed the idle connection: %+v", o)
	}
}

func TestRawClientTimeoutAndTLS(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	w, _ := New(Config{URL: slow.URL, Secrets: []string{"s"}, Timeout: 200 * time.Millisecond})
	if o := w.Send(context.Background(), testEvent(), 1); o.Label != destination.ResultTimeout {
		t.Fatalf("hung receiver: %+v, want a timeout", o)
	}

	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer tlsSrv.Close()
	roots := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	w, _ = New(Config{URL: tlsSrv.URL, Secrets: []string{"s"}, TLS: &tls.Config{RootCAs: roots}})
	if o := w.Send(context.Background(), testEvent(), 1); !o.Delivered {
		t.Fatalf("https with the server's CA: %+v", o)
	}
	w, _ = New(Config{URL: tlsSrv.URL, Secrets: []string{"s"}})
	if o := w.Send(context.Background(), testEvent(), 1); o.Delivered || o.Label != destination.ResultNetwork {
		t.Fatalf("https with an unknown CA: %+v, want a network error", o)
	}
}

func TestRawClientCancel(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	w, _ := New(Config{URL: srv.URL, Secrets: []string{"s"}, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	if o := w.Send(ctx, testEvent(), 1); o.Delivered {
		t.Fatal("a cancelled attempt succeeded")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("cancellation did not end the attempt")
	}
}

// Requests in flight at once on one destination, and on two, each borrow their own buffers
// (the pool the round trips share): every request arrives whole, with its own headers.
func TestRawClientConcurrentRequestsKeepTheirOwnBytes(t *testing.T) {
	var bad atomic.Int32
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		want := `{"id":"` + r.Header.Get("X-Event-Id") + `","pad":"` + strings.Repeat(r.Header.Get("X-Event-Id"), 50) + `"}`
		if string(body) != want || r.URL.Path != "/"+r.Header.Get("X-Event-Id")[:1] {
			bad.Add(1)
		}
		got.Add(1)
	}))
	defer srv.Close()
	dests := map[string]*Destination{}
	for _, p := range []string{"a", "b"} {
		w, err := New(Config{URL: srv.URL + "/" + p, Secrets: []string{"s"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		dests[p] = w
	}
	var failed atomic.Int32
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			p := []string{"a", "b"}[g%2]
			for i := range 20 {
				id := p + strconv.Itoa(g*100+i)
				m := &envelope.Message{ID: id, EventType: "t", AggregateType: "a", AggregateID: "1",
					Payload: []byte(`{"id":"` + id + `","pad":"` + strings.Repeat(id, 50) + `"}`)}
				if o := dests[p].Send(context.Background(), m, 1); !o.Delivered {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got.Load() != 320 || failed.Load() != 0 || bad.Load() != 0 {
		t.Fatalf("%d requests arrived (want 320), %d failed, %d arrived with another request's bytes", got.Load(), failed.Load(), bad.Load())
	}
}

// An idle connection keeps no read buffer, so bytes a server sends past its answer cannot be
// kept for the next request: that connection is closed, and the next request, on a new one,
// reads its own answer. (Kept, the stray 500 would be dropped with the reader, or with a reader
// per connection read as the next request's answer.)
func TestRawClientClosesAConnectionWithBytesPastTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close() // (before the wait: it ends the accept loop)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
					if n == 1 { // the first connection's answer is followed by a stray one
						answer += "HTTP/1.1 500 Stray\r\nContent-Length: 0\r\n\r\n"
					}
					if _, err := c.Write([]byte(answer)); err != nil {
						return
					}
				}
			})
		}
	})
	w, err := New(Config{URL: "http://" + ln.Addr().String() + "/", Secrets: []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 1; i <= 3; i++ {
		if o := w.Send(context.Background(), testEvent(), i); !o.Delivered || o.Status != http.StatusOK {
			t.Fatalf("request %d: %+v, want its own 200", i, o)
		}
	}
	// Positive control: the second connection answered cleanly and was kept for the third.
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections for 3 requests, want 2 (the first closed for its stray bytes, the second kept)", n)
	}
}
