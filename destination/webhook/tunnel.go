package webhook

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// ProxyError is a failure of the outbound proxy itself: it could not be reached, its TLS
// handshake failed, it asked for credentials (407), or it closed the connection without
// answering the CONNECT. Such an attempt is retried, and destination.Result.Unblamed keeps it
// from counting against the endpoint. A CONNECT answered with another status (403 by the
// proxy's policy, 502 or 504 when it could not reach the endpoint) is the endpoint's failure.
type ProxyError struct {
	Proxy string // the proxy's address, host:port
	Err   error
}

func (e *ProxyError) Error() string { return fmt.Sprintf("egress proxy %s: %v", e.Proxy, e.Err) }

// Unwrap returns the cause.
func (e *ProxyError) Unwrap() error { return e.Err }

// tunnel dials the endpoint through an HTTP proxy with CONNECT, to an address it resolved and
// checked itself: the proxy is told an IP address, never a name it would resolve on its own,
// so the guard (control) sees every address a connection goes to, and a name rebound after
// the check cannot lead anywhere else.
type tunnel struct {
	proxyAddr string      // host:port of the proxy
	proxyTLS  *tls.Config // for an https:// proxy; nil for http://
	auth      string      // Proxy-Authorization, or ""
	host      string      // the endpoint's host, as in its URL
	port      string
	resolver  *net.Resolver
	control   func(network, address string, c syscall.RawConn) error
	dialer    net.Dialer // to the proxy: the operator's, not checked by the guard
}

func newTunnel(proxy, target *url.URL, port string, resolver *net.Resolver, control func(string, string, syscall.RawConn) error, timeout time.Duration) *tunnel {
	t := &tunnel{host: target.Hostname(), port: port, resolver: resolver, control: control,
		dialer: net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}}
	pport := proxy.Port()
	if pport == "" {
		pport = map[string]string{"http": "80", "https": "443"}[proxy.Scheme]
	}
	t.proxyAddr = net.JoinHostPort(proxy.Hostname(), pport)
	if proxy.Scheme == "https" {
		t.proxyTLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: proxy.Hostname()}
	}
	if u := proxy.User; u != nil {
		pw, _ := u.Password()
		t.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw))
	}
	if t.resolver == nil {
		t.resolver = net.DefaultResolver
	}
	return t
}

// dial returns a connection tunnelled to the endpoint's checked address.
func (t *tunnel) dial(ctx context.Context) (net.Conn, error) {
	target, err := t.resolve(ctx)
	if err != nil {
		return nil, err
	}
	c, err := t.dialer.DialContext(ctx, "tcp", t.proxyAddr)
	if err != nil {
		return nil, &ProxyError{Proxy: t.proxyAddr, Err: err}
	}
	if t.proxyTLS != nil {
		tc := tls.Client(c, t.proxyTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, &ProxyError{Proxy: t.proxyAddr, Err: err}
		}
		c = tc
	}
	if err := t.connect(ctx, c, target); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// connect asks the proxy for a tunnel to target and reads its answer.
func (t *tunnel) connect(ctx context.Context, c net.Conn, target string) error {
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
		defer func() { _ = c.SetDeadline(time.Time{}) }()
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if t.auth != "" {
		req += "Proxy-Authorization: " + t.auth + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		return &ProxyError{Proxy: t.proxyAddr, Err: err}
	}
	// One byte at a time would be slow; a bufio.Reader may read past the answer, but a proxy
	// sends nothing of the tunnel before the client speaks, so it holds the answer only.
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return &ProxyError{Proxy: t.proxyAddr, Err: fmt.Errorf("no answer to CONNECT: %w", err)}
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		return &ProxyError{Proxy: t.proxyAddr, Err: errors.New("407 Proxy Authentication Required: give the proxy's user:password in --egress-proxy")}
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("the egress proxy %s answered CONNECT %s with %s (it could not, or would not, reach the endpoint)",
			t.proxyAddr, target, resp.Status)
	case br.Buffered() > 0:
		return &ProxyError{Proxy: t.proxyAddr, Err: errors.New("it sent data before the tunnel was used")}
	}
	return nil
}

// resolve returns the first address of the endpoint's host that the guard admits, as
// ip:port; the guard's refusal of the first address when it admits none.
func (t *tunnel) resolve(ctx context.Context) (string, error) {
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(t.host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = t.resolver.LookupNetIP(ctx, "ip", t.host); err != nil {
		return "", err
	}
	var first error
	for _, a := range addrs {
		target := netip.AddrPortFrom(a.Unmap(), parsePort(t.port)).String()
		if t.control == nil {
			return target, nil
		}
		err := t.control("tcp", target, nil)
		if err == nil {
			return target, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("lookup %s: no address", t.host)
	}
	return "", first
}

func parsePort(p string) uint16 {
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}
