package inbox

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// allowlist holds Config.AllowedNetworks and Config.TrustedProxies, parsed.
type allowlist struct {
	allowed, trusted []netip.Prefix
}

// newAllowlist parses the two lists. An entry is a CIDR ("10.0.0.0/8", "2001:db8::/32") or a
// single address ("192.0.2.7", meaning /32 or /128).
func newAllowlist(allowed, trusted []string) (*allowlist, error) {
	a, err := parsePrefixes("AllowedNetworks", allowed)
	if err != nil {
		return nil, err
	}
	t, err := parsePrefixes("TrustedProxies", trusted)
	if err != nil {
		return nil, err
	}
	if len(a) == 0 && len(t) > 0 {
		return nil, fmt.Errorf("inbox: TrustedProxies is set but AllowedNetworks is empty; the proxies only matter for the allowlist, so set AllowedNetworks too")
	}
	if len(a) == 0 {
		return nil, nil
	}
	return &allowlist{allowed: a, trusted: t}, nil
}

func parsePrefixes(field string, list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("inbox: %s entry %q is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32: %w", field, s, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("inbox: %s entry %q is not a CIDR such as 10.0.0.0/8 or an address: %w", field, s, err)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func contains(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// check returns nil if the request's client is in the allowed networks, else ErrForbidden.
func (l *allowlist) check(r *http.Request) error {
	client, ok := l.client(r)
	if !ok {
		return fmt.Errorf("%w: the client address (peer %q, or an X-Forwarded-For entry behind a trusted proxy) is not an IP address",
			ErrForbidden, clip(r.RemoteAddr))
	}
	if !contains(l.allowed, client) {
		return fmt.Errorf("%w: %s is outside AllowedNetworks", ErrForbidden, client)
	}
	return nil
}

// client is the address the allowlist judges: the direct peer, unless the peer is a trusted
// proxy; then X-Forwarded-For is read from the right, skipping trusted proxies, and the first
// untrusted address is the client (a client can prepend anything to the header, but cannot
// forge what the trusted proxies appended). If every address is trusted, the left-most one
// counts. An entry that is not an address stops the walk and is refused.
func (l *allowlist) client(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseHost(r.RemoteAddr, true)
	if !ok || !contains(l.trusted, peer) {
		return peer, ok
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHost(strings.TrimSpace(hops[i]), false)
		if !ok {
			return netip.Addr{}, false
		}
		client = a
		if !contains(l.trusted, a) {
			break
		}
	}
	return client, true
}

// parseHost reads an address, with or without a port (RemoteAddr has one; an X-Forwarded-For
// entry may), unmapping IPv4-in-IPv6 and dropping any zone.
func parseHost(s string, withPort bool) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if withPort {
		if host, _, err := net.SplitHostPort(s); err == nil {
			s = host
		}
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}
