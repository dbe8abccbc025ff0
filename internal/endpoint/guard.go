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

// allowHint ends every refusal of the guard's own rules; publicHint every refusal of an address
// only the egress rules refuse.
const (
	allowHint  = "; if this endpoint really must reach it, allow it explicitly (--allow-private-url, AllowPrivateURL)"
	publicHint = "; endpoints whose URL a tenant gave, and every endpoint under --egress-deny-private, reach public " +
		"addresses only: give a public URL, or admit the range with --egress-allow"
	httpsHint = "; the relay runs with --egress-https-only: give an https:// URL"
)

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

// Access is what the guard lets one endpoint's connections reach.
type Access uint8

const (
	// AccessDefault refuses link-local addresses (169.254.0.0/16, fe80::/10), the cloud
	// metadata services' names and addresses, "this host" (0.0.0.0/8, ::) and the relay's own
	// metrics address: an operator's endpoint, without --egress-deny-private.
	AccessDefault Access = iota
	// AccessPublic refuses, besides, loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7),
	// carrier-grade NAT (100.64/10), multicast and reserved addresses, and these embedded in
	// NAT64, 6to4 and IPv4-compatible IPv6 addresses, unless Egress.Allow admits them: an
	// endpoint whose URL a tenant gave (deny_private), or every endpoint under
	// --egress-deny-private.
	AccessPublic
	// AccessAny refuses nothing: an endpoint with allow_private_url (an operator's decision;
	// deny_private endpoints cannot have it).
	AccessAny
)

// Egress is the relay's egress policy, which the CLI reads from --egress-deny-private,
// --egress-allow and --egress-https-only (and their environment variables, so that `run`,
// `endpoint add` and the API agree). The zero value adds nothing to the guard's own rules.
type Egress struct {
	// DenyPrivate gives every endpoint AccessPublic, but those with allow_private_url. False:
	// only endpoints with deny_private have it.
	DenyPrivate bool
	// Allow are ranges AccessPublic admits though they are loopback, private, CGNAT, multicast
	// or reserved (internal partners). They never admit what AccessDefault refuses. Empty: none.
	Allow []netip.Prefix
	// HTTPSOnly refuses http:// URLs, for every endpoint. False: http and https.
	HTTPSOnly bool
}

// publicRanges are what AccessPublic refuses besides AccessDefault, each with its name.
var publicRanges = []struct {
	p    netip.Prefix
	name string
}{
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("fc00::/7"), "private (unique local)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (shared address space)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved (IETF protocol assignments)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// embedded4 are IPv6 ranges that carry an IPv4 address (checked as that address), and where.
var embedded4 = []struct {
	p   netip.Prefix
	off int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12}, // NAT64
	{netip.MustParsePrefix("2002::/16"), 2},     // 6to4
	{netip.MustParsePrefix("::/96"), 12},        // IPv4-compatible (deprecated), :: and ::1 aside
}

// Guard is the URL guard: it refuses endpoint URLs, and connections, by each endpoint's Access
// (AccessOf), since customers type these URLs: link-local and metadata addresses, "this host"
// and the relay's own metrics address always (unless allow_private_url), private ranges for
// endpoints with AccessPublic, http:// under Egress.HTTPSOnly. The zero Guard knows no metrics
// address and no egress policy.
type Guard struct {
	// Egress is the relay's egress policy. The zero value: none.
	Egress Egress

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

// AccessOf is the Access of an endpoint with these columns: AccessPublic for deny_private,
// AccessAny for allow_private_url, AccessPublic for every other endpoint under
// Egress.DenyPrivate, else AccessDefault. g may be nil (no policy).
func (g *Guard) AccessOf(denyPrivate, allowPrivate bool) Access {
	switch {
	case denyPrivate:
		return AccessPublic
	case allowPrivate:
		return AccessAny
	case g != nil && g.Egress.DenyPrivate:
		return AccessPublic
	}
	return AccessDefault
}

// CheckURL checks an endpoint URL before any lookup, for an endpoint of Access a: its scheme
// (under Egress.HTTPSOnly), and its host: a literal address (in any form the system resolver
// reads, 0x7f.1 and 2852039166 included), a metadata name, localhost (AccessPublic: any port;
// otherwise at the metrics port). Names that resolve to a refused address are caught by
// Control, at each connection.
func (g *Guard) CheckURL(u *url.URL, a Access) error {
	if g.Egress.HTTPSOnly && !strings.EqualFold(u.Scheme, "https") {
		return fmt.Errorf("%w: %s:// is not https%s", ErrGuarded, u.Scheme, httpsHint)
	}
	if a == AccessAny {
		return nil
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := portOf(u)
	if metadataHosts[host] {
		return fmt.Errorf("%w: %s is a cloud metadata service%s", ErrGuarded, host, allowHint)
	}
	if ip, ok := literalIP(host); ok {
		return g.CheckAddr(ip, port, a)
	}
	isLocalhost := host == "localhost" || strings.HasSuffix(host, ".localhost")
	if isLocalhost && a == AccessPublic {
		return fmt.Errorf("%w: %s is this host (loopback)%s", ErrGuarded, host, publicHint)
	}
	if isLocalhost && g.metricsPort != 0 && port == g.metricsPort {
		return fmt.Errorf("%w: %s:%d is the relay's own metrics address%s", ErrGuarded, host, port, allowHint)
	}
	return nil
}

// CheckAddr checks one address an endpoint of Access a would connect to.
func (g *Guard) CheckAddr(ip netip.Addr, port int, a Access) error {
	if a == AccessAny {
		return nil
	}
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
	case a == AccessPublic:
		return g.checkPublic(ip, port)
	}
	return nil
}

// checkPublic refuses what AccessPublic adds, unless Egress.Allow admits the address.
func (g *Guard) checkPublic(ip netip.Addr, port int) error {
	for _, p := range g.Egress.Allow {
		if p.Contains(ip) {
			return nil
		}
	}
	for _, e := range embedded4 {
		if !e.p.Contains(ip) || ip.IsLoopback() || ip.IsUnspecified() {
			continue
		}
		b := ip.As16()
		inner := netip.AddrFrom4([4]byte(b[e.off : e.off+4]))
		if g.CheckAddr(inner, port, AccessPublic) != nil {
			return fmt.Errorf("%w: %s carries the IPv4 address %s, which is not public%s", ErrGuarded, ip, inner, publicHint)
		}
	}
	for _, r := range publicRanges {
		if r.p.Contains(ip) {
			return fmt.Errorf("%w: %s is %s%s", ErrGuarded, ip, r.name, publicHint)
		}
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
// CheckAddr refuses for Access a: a name checked when the endpoint was added may resolve to
// another address later (DNS rebinding). For AccessAny it returns nil, for no check.
func (g *Guard) Control(a Access) func(network, address string, c syscall.RawConn) error {
	if a == AccessAny {
		return nil
	}
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot read the address %q being dialled", ErrGuarded, address)
		}
		return g.CheckAddr(ap.Addr(), int(ap.Port()), a)
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
