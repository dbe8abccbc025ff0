package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// rawClient posts over kept-alive HTTP/1.1 connections, writing each request (head and body)
// in one call and reading the answer with readResponse. It does what net/http's client
// does for this one shape of request at about half the CPU per request, which on a machine
// shared with PostgreSQL and the receiver is most of the relay's cost. It is used only for a
// direct connection: when a proxy applies to the URL, the Destination uses net/http instead.
type rawClient struct {
	keepAnswers bool        // keep the start of a 2xx answer's body too (Config.KeepAnswers)
	addr        string      // host:port to dial
	host        string      // Host header
	target      string      // request-target: path and query
	tls         *tls.Config // nil for http
	timeout     time.Duration
	idle        chan *rawConn
	dialer      net.Dialer
	tunnel      *tunnel // set: every connection goes through this proxy
}

// rawConn is one connection. Its read and write buffers are borrowed from pools for a round
// trip only (bufs): an idle connection holds none, so the memory of the buffers follows the
// requests in flight, not the connections kept alive (thousands of endpoints each keep one).
type rawConn struct {
	c    net.Conn
	used bool // has carried a request before
}

// bufs are a round trip's buffers: the answer's reader and the request being written.
type bufs struct {
	br  *bufio.Reader
	buf []byte
}

// readSize is a round trip's read buffer: an answer's head fits in it.
const readSize = 4096

// maxPooledWrite caps the write buffers put back in the pool: a large request's buffer is left
// to the GC instead of being kept for small ones.
const maxPooledWrite = 64 << 10

var roundTripBufs = sync.Pool{New: func() any {
	return &bufs{br: bufio.NewReaderSize(nil, readSize), buf: make([]byte, 0, 1024)}
}}

func getBufs(c net.Conn) *bufs {
	b := roundTripBufs.Get().(*bufs)
	b.br.Reset(c)
	return b
}

func putBufs(b *bufs) {
	b.br.Reset(nil)
	if cap(b.buf) > maxPooledWrite {
		b.buf = make([]byte, 0, 1024)
	}
	roundTripBufs.Put(b)
}

// maxDrain is how much of an answer's body is read to keep its connection; a longer body
// closes the connection instead.
const maxDrain = 64 << 10

func newRawClient(u *url.URL, tlsCfg *tls.Config, timeout time.Duration, conns int) *rawClient {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	rc := &rawClient{
		addr: net.JoinHostPort(u.Hostname(), port), host: u.Host, target: u.RequestURI(),
		timeout: timeout, idle: make(chan *rawConn, conns), dialer: net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second},
	}
	if u.Scheme == "https" {
		cfg := tlsCfg.Clone()
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		rc.tls = cfg
	}
	return rc
}

// post sends one request whose header lines appendHead appends, and returns the answer's status,
// Retry-After and Location. A kept-alive connection that the server closed while idle is retried
// once on a new one.
func (rc *rawClient) post(ctx context.Context, appendHead func([]byte) []byte, body []byte) (response, error) {
	for try := 0; ; try++ {
		conn, err := rc.get(ctx)
		if err != nil {
			return response{}, err
		}
		resp, err := rc.roundTrip(ctx, conn, appendHead, body)
		if err == nil || !conn.used || try > 0 || !staleConn(err) {
			return resp, err
		}
	}
}

func (rc *rawClient) roundTrip(ctx context.Context, conn *rawConn, appendHead func([]byte) []byte, body []byte) (response, error) {
	if err := conn.c.SetDeadline(time.Now().Add(rc.timeout)); err != nil {
		conn.c.Close()
		return response{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	bb := getBufs(conn.c)
	defer putBufs(bb)
	b := bb.buf[:0]
	b = append(b, "POST "...)
	b = append(b, rc.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, rc.host...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	b = appendHead(b)
	b = append(b, "\r\n"...)
	b = append(b, body...)
	bb.buf = b
	if _, err := conn.c.Write(b); err != nil {
		conn.c.Close()
		return response{}, err
	}
	resp, err := readResponse(bb.br, rc.keepAnswers)
	if err != nil {
		conn.c.Close()
		return response{}, err
	}
	// Bytes read past the answer would be lost with the reader, and would not belong to the
	// next request's answer anyway: such a connection is not kept.
	if !resp.keepAlive || ctx.Err() != nil || bb.br.Buffered() > 0 {
		conn.c.Close()
	} else {
		rc.put(conn)
	}
	return resp, nil
}

func (rc *rawClient) get(ctx context.Context) (*rawConn, error) {
	select {
	case c := <-rc.idle:
		c.used = true
		return c, nil
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, rc.timeout)
	defer cancel()
	c, err := rc.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c}, nil
}

// dial connects to the endpoint, directly or through the tunnel, with TLS for https.
func (rc *rawClient) dial(ctx context.Context) (net.Conn, error) {
	if rc.tunnel == nil {
		if rc.tls != nil {
			d := tls.Dialer{NetDialer: &rc.dialer, Config: rc.tls}
			return d.DialContext(ctx, "tcp", rc.addr)
		}
		return rc.dialer.DialContext(ctx, "tcp", rc.addr)
	}
	c, err := rc.tunnel.dial(ctx)
	if err != nil || rc.tls == nil {
		return c, err
	}
	tc := tls.Client(c, rc.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

func (rc *rawClient) put(c *rawConn) {
	select {
	case rc.idle <- c:
	default:
		c.c.Close()
	}
}

// staleConn reports whether err looks like a kept-alive connection the server had closed.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// close closes the idle connections.
func (rc *rawClient) close() {
	for {
		select {
		case c := <-rc.idle:
			c.c.Close()
		default:
			return
		}
	}
}
