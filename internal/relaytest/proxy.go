package relaytest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy is a TCP proxy on 127.0.0.1 that can freeze: stop forwarding in both directions
// without closing anything, as a silent network partition does (no FIN, no RST). While frozen
// it still accepts connections, which stay silent too. Point a relay's DSN at it with DSN.
type Proxy struct {
	network string // tcp or unix
	target  string
	ln      net.Listener

	mu     sync.Mutex
	thawed chan struct{} // closed while forwarding; a fresh, open one while frozen
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every copier
}

// NewProxy listens on a free loopback port and forwards each connection to target: a
// host:port, or the path of a Unix socket (it starts with "/").
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	network := "tcp"
	if strings.HasPrefix(target, "/") {
		network = "unix"
	}
	p := &Proxy{network: network, target: target, ln: ln, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DSN returns dsn (a postgres:// URL) with its host and port replaced by the proxy's.
func (p *Proxy) DSN(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("relaytest: proxy needs a postgres:// URL DSN, got %q", dsn)
	}
	u.Host = p.Addr()
	q := u.Query()
	q.Del("host") // a socket directory given as a parameter would win over the URL's host
	q.Del("port")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// NewProxyFor starts a proxy in front of the server that dsn names (its TCP address, or its
// Unix socket when the host is a directory, as the test clusters' DSNs are).
func NewProxyFor(dsn string) (*Proxy, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		target = filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	return NewProxy(target)
}

// Freeze stops forwarding: bytes already read are held, nothing is written, nothing is closed.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isThawed() && !p.closed {
		p.thawed = make(chan struct{})
	}
}

// Thaw resumes forwarding, held bytes and closes first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isThawed() {
		close(p.thawed)
	}
}

func (p *Proxy) isThawed() bool {
	select {
	case <-p.thawed:
		return true
	default:
		return false
	}
}

// Close stops listening, closes every connection and waits for the proxy's goroutines. It is
// safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if !p.isThawed() {
		close(p.thawed) // frozen copiers wake, and find their connections closed
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve connects client to the target once forwarding is allowed, then copies both ways.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	p.gate()
	server, err := net.Dial(p.network, p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pipe(server, client) }()
	go func() { defer both.Done(); p.pipe(client, server) }()
	both.Wait()
}

// pipe copies from src to dst, holding each chunk (and the end of the stream) while frozen.
// When either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.gate()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: either way this pipe is done
		}
	}
}

// gate waits while the proxy is frozen.
func (p *Proxy) gate() {
	p.mu.Lock()
	ch := p.thawed
	p.mu.Unlock()
	<-ch
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = c.Close()
	delete(p.conns, c)
}
