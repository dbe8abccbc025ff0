package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// receiver counts what reaches it.
func receiver(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &got
}

// A name that resolves to loopback when the connection is made (the DNS-rebinding shape: it
// passes the check of its URL, which does not resolve it) is refused at dial time for a
// tenant's endpoint, directly and through the egress proxy, and reached for an operator's
// endpoint (the positive control). The proxy is told the checked address, never the name.
func TestANameResolvingToLoopbackIsRefusedAtDialTime(t *testing.T) {
	srv, got := receiver(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dns := relaytest.FakeDNS(map[string]string{"partner.test": "127.0.0.1"})
	raw := "http://partner.test:" + strconv.Itoa(port) + "/hooks"
	u, _ := url.Parse(raw)
	g := &endpoint.Guard{}
	if err := g.CheckURL(u, endpoint.AccessPublic); err != nil {
		t.Fatalf("the URL's check refused a plain name: %v", err)
	}
	proxy := relaytest.NewConnectProxy()
	defer proxy.Close()
	proxyURL, _ := url.Parse(proxy.URL)
	for _, via := range []*url.URL{nil, proxyURL} {
		name := map[bool]string{true: "direct", false: "through the proxy"}[via == nil]
		t.Run(name, func(t *testing.T) {
			send := func(a endpoint.Access) destination.Result {
				w, err := New(Config{URL: raw, Secrets: []string{"s"}, Control: g.Control(a), Resolver: dns, Proxy: via})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				return w.Send(context.Background(), testEvent(), 1)
			}
			before := got.Load()
			if o := send(endpoint.AccessDefault); !o.Delivered {
				t.Fatalf("positive control, an operator's endpoint: %+v", o)
			}
			o := send(endpoint.AccessPublic)
			if o.Delivered || !errors.Is(o.Err, endpoint.ErrGuarded) || !strings.Contains(o.Err.Error(), "127.0.0.1 is loopback") ||
				o.Unblamed || o.Label != destination.ResultNetwork {
				t.Fatalf("a tenant's endpoint: %+v, want a refusal of the guard counted against it", o)
			}
			if n := got.Load() - before; n != 1 {
				t.Fatalf("the receiver got %d requests, want the control's one", n)
			}
		})
	}
	for _, target := range proxy.Targets() {
		if _, err := netip.ParseAddrPort(target); err != nil {
			t.Errorf("the proxy was asked for %q: a name it would resolve itself, not the checked address", target)
		}
	}
	if len(proxy.Targets()) != 1 {
		t.Errorf("the proxy saw %d CONNECTs, want the control's one (the refused one never reaches it): %q", len(proxy.Targets()), proxy.Targets())
	}
}

// Through a real CONNECT proxy, with its credentials, a signed request is delivered and its
// answer comes back; a proxy that is down, or asks for credentials it was not given, is a
// failure of the proxy (ResultProxy, Unblamed: not the endpoint's); a proxy that answers the
// CONNECT with 502 (the endpoint is unreachable from it) is the endpoint's failure.
func TestEgressProxy(t *testing.T) {
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Clone())
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	proxy := relaytest.NewConnectProxy()
	defer proxy.Close()
	proxy.SetAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("relay:pw")))
	send := func(proxyURL string) destination.Result {
		p, err := url.Parse(proxyURL)
		if err != nil {
			t.Fatal(err)
		}
		w, err := New(Config{URL: srv.URL + "/hooks", Secrets: []string{"s"}, Proxy: p})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		return w.Send(context.Background(), testEvent(), 1)
	}
	withAuth := strings.Replace(proxy.URL, "http://", "http://relay:pw@", 1)
	if o := send(withAuth); !o.Delivered || o.Status != http.StatusAccepted {
		t.Fatalf("through the proxy: %+v", o)
	}
	if h, _ := seen.Load().(http.Header); h.Get("X-Signature") == "" || h.Get("X-Event-Id") != testEvent().ID {
		t.Fatalf("the receiver got headers %v", h)
	}
	if ts := proxy.Targets(); len(ts) != 1 || ts[0] != srv.Listener.Addr().String() {
		t.Fatalf("the proxy tunnelled to %q, want %s", ts, srv.Listener.Addr())
	}

	o := send(proxy.URL) // no credentials
	var pe *ProxyError
	if o.Delivered || !o.Unblamed || o.Label != destination.ResultProxy || !errors.As(o.Err, &pe) || !strings.Contains(o.Err.Error(), "407") {
		t.Fatalf("407: %+v", o)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	if o := send(down.URL); o.Delivered || !o.Unblamed || o.Label != destination.ResultProxy {
		t.Fatalf("a proxy that is down: %+v", o)
	}
	proxy.SetRefuse(http.StatusBadGateway)
	if o := send(withAuth); o.Delivered || o.Unblamed || o.Label != destination.ResultNetwork || !strings.Contains(o.Err.Error(), "502") {
		t.Fatalf("a CONNECT answered 502: %+v, want the endpoint's failure", o)
	}
}

// A redirect to a private address is not followed, for a tenant's endpoint as for any: the
// answer is a failed attempt, and the address it pointed to gets nothing.
func TestRedirectToAPrivateAddressIsNotFollowed(t *testing.T) {
	inner, got := receiver(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/admin", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	g := &endpoint.Guard{Egress: endpoint.Egress{Allow: []netip.Prefix{netip.MustParsePrefix(srv.Listener.Addr().(*net.TCPAddr).IP.String() + "/32")}}}
	for _, std := range []bool{false, true} {
		w, err := New(Config{URL: srv.URL + "/hooks", Secrets: []string{"s"}, Control: g.Control(endpoint.AccessPublic)})
		if err != nil {
			t.Fatal(err)
		}
		if std {
			w.raw, w.client = nil, &http.Client{CheckRedirect: noRedirects}
		}
		o := w.Send(context.Background(), testEvent(), 1)
		w.Close()
		var re *RedirectError
		if o.Delivered || o.Status != http.StatusTemporaryRedirect || !errors.As(o.Err, &re) || !strings.Contains(re.Location, "/admin") {
			t.Fatalf("std %v: %+v, want the 307 as a failed attempt", std, o)
		}
	}
	if got.Load() != 0 {
		t.Fatalf("the private address got %d requests", got.Load())
	}
}
