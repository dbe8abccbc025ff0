// Package endpointdest opens the webhook destination of a partner endpoint's row, the one way
// the relay (each endpoint's lane) and the API (its test attempt) both do: the URL checked by the
// guard for the row's access, the egress proxy chosen, the secrets opened with the keys ring,
// and the guard again at every connection. A change to how an endpoint is reached is made here
// once, so that a test attempt reaches a partner exactly as a delivery does.
package endpointdest

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
)

// Options are what the caller decides beside the row.
type Options struct {
	Guard *endpoint.Guard // checks the URL and every connection; nil: none
	Ring  *seal.Keyring   // opens the row's sealed secrets; nil: the secrets are stored in clear
	// Proxy is the process's egress proxy (--egress-proxy), used when the row names none; empty:
	// the environment's proxy settings; endpoint.ProxyDirect: none.
	Proxy    string
	Resolver *net.Resolver // nil: net.DefaultResolver
	// Timeout bounds an attempt (0: webhook's 10 s); MaxConns is the kept-alive connections (0:
	// webhook's 64).
	Timeout  time.Duration
	MaxConns int
	// UserAgent and Source are the requests' User-Agent and CloudEvents source.
	UserAgent, Source string
	// KeepAnswers keeps the start of a 2xx answer's body too (the API's test attempt).
	KeepAnswers bool
	// Now is when the secrets are opened (their grace periods); zero: time.Now().
	Now time.Time
}

// Error is why a row cannot be opened, with the field of the row at fault: "url",
// "egress_proxy" or "secrets".
type Error struct {
	Field string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Open builds row's webhook destination. next is when its secrets change (a rotation's grace
// ends; zero: never), when the caller should open it again. A failure of the row is an *Error.
func Open(row endpoint.Row, o Options) (d *webhook.Destination, next time.Time, err error) {
	access := o.Guard.AccessOf(row.DenyPrivate, row.AllowPrivateURL)
	u, err := endpoint.CheckURL(row.URL, o.Guard, access)
	if err != nil {
		return nil, time.Time{}, &Error{Field: "url", Err: err}
	}
	proxy, err := Proxy(o.Proxy, row.EgressProxy, u)
	if err != nil {
		return nil, time.Time{}, &Error{Field: "egress_proxy", Err: err}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	keys, next, err := row.Keys(o.Ring, now)
	if err != nil {
		return nil, time.Time{}, &Error{Field: "secrets", Err: err}
	}
	d, err = webhook.New(webhook.Config{URL: row.URL, Keys: keys, Scheme: row.SignatureScheme(), Timeout: o.Timeout,
		MaxConns: o.MaxConns, UserAgent: o.UserAgent, Format: webhook.Format(row.Format), DefaultSource: o.Source,
		Control: o.Guard.Control(access), Proxy: proxy, Resolver: o.Resolver, KeepAnswers: o.KeepAnswers})
	if err != nil {
		return nil, time.Time{}, err // (not the row's fault: no field)
	}
	return d, next, nil
}

// Proxy is the outbound proxy of an endpoint's connections: the row's egress_proxy, else the
// process's, else the environment's proxy settings for u; nil: direct.
func Proxy(processProxy, rowProxy string, u *url.URL) (*url.URL, error) {
	raw := rowProxy
	if raw == "" {
		raw = processProxy
	}
	switch raw {
	case endpoint.ProxyDirect:
		return nil, nil
	case "":
		return http.ProxyFromEnvironment(&http.Request{URL: u})
	}
	p, err := endpoint.ParseProxy(raw)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	return p, nil
}
