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

	mu      sync.Mutex
	auth    string // the Proxy-Authorization it requires; "": none
	refuse  int    // the status it answers every CONNECT with; 0: it tunnels
	targets []string
	conns   []net.Conn // both ends of every tunnel, closed by Close
	closed  bool
	wg      sync.WaitGroup
}

// NewConnectProxy starts a proxy on 127.0.0.1; Close stops it and waits for its tunnels.
func NewConnectProxy() *ConnectProxy {
	p := &ConnectProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

// SetAuth makes it require this Proxy-Authorization value (407 without it); "": none.
func (p *ConnectProxy) SetAuth(v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.auth = v
}

// SetRefuse makes it answer every CONNECT with this status instead of tunnelling; 0 tunnels.
func (p *ConnectProxy) SetRefuse(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = status
}

// Targets returns the targets asked for so far, in order.
func (p *ConnectProxy) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// Close stops the proxy and its tunnels (a hijacked connection is the proxy's to close).
func (p *ConnectProxy) Close() {
	p.Server.CloseClientConnections()
	p.Server.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track keeps both ends of a tunnel for Close; false when the proxy is closing.
func (p *ConnectProxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns = append(p.conns, a, b)
	p.wg.Add(2)
	return true
}

func (p *ConnectProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, r.Host)
	auth, refuse := p.auth, p.refuse
	p.mu.Unlock()
	switch {
	case auth != "" && r.Header.Get("Proxy-Authorization") != auth:
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	case refuse != 0:
		w.WriteHeader(refuse)
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
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
	go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
}
