package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// ErrGuarded is wrapped by the URL guard's refusals.
var ErrGuarded = errors.New("the URL guard refuses this address")

// allowHint ends every refusal of the guard.
const allowHint = "; if this endpoint really must reach it, allow it explicitly (--allow-private-url, AllowPrivateURL)"

// metadataHosts are the names cloud providers give their instance metadata services (which
// hand out credentials): refused as endpoint hosts, whatever they resolve to.
var metadataHosts = map[string]bool{
	"metadata":                     true,
	"metadata.google.internal":     true,
	"metadata.goog":                true,
	"metadata.azure.com":           true,
	"instance-data":                true,
	"instance-data.ec2.internal":   true,
	"metadata.tencentyun.com":      true,
	"metadata.platformequinix.com": true,
}

// metadataAddrs are metadata services outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
	thisHost4  = netip.MustParsePrefix("0.0.0.0/8")
)

// Guard is the URL guard: it refuses endpoint URLs, and connections, to link-local addresses
// (169.254.0.0/16, where cloud metadata services answer, and fe80::/10), to the metadata
// services' names and other addresses, to "this host" (0.0.0.0/8, ::), and to the relay's own
// metrics address, since customers type these URLs. An endpoint with allow_private_url is let
// through. The zero Guard knows no metrics address.
type Guard struct {
	metricsPort int
	metricsIP   netip.Addr // unspecified when the metrics listener binds every address
	local       []netip.Addr
}

// NewGuard returns a guard that also refuses the relay's metrics address (--metrics-addr,
// e.g. ":9187"; empty: none): at its port, the loopback addresses, the unspecified ones, the
// address it binds and, when it binds every address, the host's own interface addresses.
func NewGuard(metricsAddr string) (*Guard, error) {
	g := &Guard{}
	if metricsAddr == "" {
		return g, nil
	}
	host, port, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %q: %w", metricsAddr, err)
	}
	if g.metricsPort, err = strconv.Atoi(port); err != nil || g.metricsPort <= 0 || g.metricsPort > 65535 {
		return nil, fmt.Errorf("metrics address %q: the port is not a number from 1 to 65535", metricsAddr)
	}
	g.metricsIP = netip.IPv6Unspecified()
	if ip, err := netip.ParseAddr(host); err == nil {
		g.metricsIP = ip.Unmap()
	} else if host != "" && !strings.EqualFold(host, "localhost") {
		return nil, fmt.Errorf("metrics address %q: the host must be empty, localhost or an IP address", metricsAddr)
	}
	if g.metricsIP.IsUnspecified() {
		g.local = interfaceAddrs()
	}
	return g, nil
}

func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// CheckURL checks the host of an endpoint URL before any lookup: a literal address (in any
// form the system resolver reads, 0x7f.1 and 2852039166 included), a metadata name, or
// localhost at the metrics port. Names that resolve to a refused address are caught by
// Control, at each connection.
func (g *Guard) CheckURL(u *url.URL) error {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := portOf(u)
	if metadataHosts[host] {
		return fmt.Errorf("%w: %s is a cloud metadata service%s", ErrGuarded, host, allowHint)
	}
	if ip, ok := literalIP(host); ok {
		return g.CheckAddr(ip, port)
	}
	if g.metricsPort != 0 && port == g.metricsPort && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return fmt.Errorf("%w: %s:%d is the relay's own metrics address%s", ErrGuarded, host, port, allowHint)
	}
	return nil
}

// CheckAddr checks one address an endpoint would connect to.
func (g *Guard) CheckAddr(ip netip.Addr, port int) error {
	ip = ip.Unmap().WithZone("")
	switch {
	case linkLocal4.Contains(ip) || linkLocal6.Contains(ip):
		return fmt.Errorf("%w: %s is link-local, where cloud metadata services answer%s", ErrGuarded, ip, allowHint)
	case isMetadataAddr(ip):
		return fmt.Errorf("%w: %s is a cloud metadata service%s", ErrGuarded, ip, allowHint)
	case ip.IsUnspecified() || thisHost4.Contains(ip):
		return fmt.Errorf("%w: %s means this host itself%s", ErrGuarded, ip, allowHint)
	case g.isMetrics(ip, port):
		return fmt.Errorf("%w: %s is the relay's own metrics address%s", ErrGuarded, netip.AddrPortFrom(ip, uint16(port)), allowHint)
	}
	return nil
}

func isMetadataAddr(ip netip.Addr) bool {
	for _, m := range metadataAddrs {
		if ip == m {
			return true
		}
	}
	return false
}

func (g *Guard) isMetrics(ip netip.Addr, port int) bool {
	if g.metricsPort == 0 || port != g.metricsPort {
		return false
	}
	if ip.IsLoopback() || ip == g.metricsIP {
		return true
	}
	if !g.metricsIP.IsUnspecified() {
		return false
	}
	for _, l := range g.local {
		if ip == l {
			return true
		}
	}
	return false
}

// Control returns a net.Dialer Control function that refuses, at connect time, the addresses
// CheckAddr refuses: a name checked when the endpoint was added may resolve to another
// address later (DNS rebinding). With allowPrivate (the endpoint's allow_private_url) it
// returns nil, for no check.
func (g *Guard) Control(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	if allowPrivate {
		return nil
	}
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot read the address %q being dialled", ErrGuarded, address)
		}
		return g.CheckAddr(ap.Addr(), int(ap.Port()))
	}
}

func portOf(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return 443
	}
	return 80
}

// literalIP reads host as an IP address the way a resolver might: standard notation, and the
// inet_aton forms of IPv4 (one to four parts, each decimal, octal with a leading 0, or hex with
// 0x), which getaddrinfo accepts as addresses without any lookup.
func literalIP(host string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return ip, true
	}
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	// The last part fills the bytes the others leave.
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func atonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case p == "":
		return 0, false
	case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}
