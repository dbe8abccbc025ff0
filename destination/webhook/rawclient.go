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

type rawConn struct {
	c    net.Conn
	br   *bufio.Reader
	buf  []byte
	used bool // has carried a request before
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
	b := conn.buf[:0]
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
	conn.buf = b
	if _, err := conn.c.Write(b); err != nil {
		conn.c.Close()
		return response{}, err
	}
	resp, err := readResponse(conn.br, rc.keepAnswers)
	if err != nil {
		conn.c.Close()
		return response{}, err
	}
	if !resp.keepAlive || ctx.Err() != nil {
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
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4096), buf: make([]byte, 0, 1024)}, nil
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
