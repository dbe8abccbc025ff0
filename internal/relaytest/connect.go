package relaytest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// ConnectProxy is a real forward proxy for tests: an HTTP server that answers CONNECT by
// dialling the target it is asked for and copying bytes both ways, as an egress proxy does.
// It records each CONNECT's target, and can require credentials or refuse.
type ConnectProxy struct {
	*httptest.Server
	// Auth, if set, is the Proxy-Authorization value it requires (407 without it).
	Auth string
	// Refuse, if set, is the status it answers every CONNECT with instead of tunnelling.
	Refuse int

	mu      sync.Mutex
	targets []string
	wg      sync.WaitGroup
}

// NewConnectProxy starts a proxy on 127.0.0.1; Close stops it and waits for its tunnels.
func NewConnectProxy() *ConnectProxy {
	p := &ConnectProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// Targets returns the targets asked for so far, in order.
func (p *ConnectProxy) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// Close stops the proxy and its tunnels.
func (p *ConnectProxy) Close() {
	p.Server.CloseClientConnections()
	p.Server.Close()
	p.wg.Wait()
}

func (p *ConnectProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, r.Host)
	p.mu.Unlock()
	switch {
	case p.Auth != "" && r.Header.Get("Proxy-Authorization") != p.Auth:
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	case p.Refuse != 0:
		w.WriteHeader(p.Refuse)
		return
	}
	up, err := net.Dial("tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		c.Close()
		return
	}
	p.wg.Add(2)
	go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
	go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
}
