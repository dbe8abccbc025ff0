package endpoint

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// Every class of address a tenant's URL (AccessPublic) must not reach, in the forms a resolver
// reads, with public addresses and names as the positive controls; the same URLs pass for an
// operator's endpoint (AccessDefault) unless its own rules refuse them.
func TestAccessPublicRefusesEveryNonPublicClass(t *testing.T) {
	g := &Guard{}
	for _, tt := range []struct {
		url, refusal string // refusal "": allowed
		byDefault    bool   // refused for AccessDefault too
	}{
		{"https://partner.example/hooks", "", false},
		{"https://93.184.216.34/hooks", "", false},
		{"https://[2606:2800:220:1:248:1893:25c8:1946]/", "", false},
		{"http://127.0.0.1/", "127.0.0.1 is loopback", false},
		{"http://127.1.2.3:8080/", "loopback", false},
		{"http://[::1]/", "::1 is loopback", false},
		{"http://localhost:8080/", "localhost is this host (loopback)", false},
		{"http://api.localhost/", "this host (loopback)", false},
		{"http://2130706433/", "127.0.0.1 is loopback", false}, // decimal
		{"http://0x7f.1/", "127.0.0.1 is loopback", false},     // hex, two parts
		{"http://0177.0.0.1/", "127.0.0.1 is loopback", false}, // octal
		{"http://[::ffff:127.0.0.1]/", "127.0.0.1 is loopback", false},
		{"http://[::ffff:7f00:1]/", "127.0.0.1 is loopback", false},
		{"http://10.1.2.3/", "10.1.2.3 is private", false},
		{"http://172.16.0.1/", "private", false},
		{"http://172.31.255.255/", "private", false},
		{"http://172.32.0.1/", "", false}, // just outside 172.16/12
		{"http://192.168.1.1/", "private", false},
		{"http://[fd12:3456::1]/", "unique local", false},
		{"http://[fc00::1]/", "unique local", false},
		{"http://100.64.0.1/", "carrier-grade NAT", false},
		{"http://100.127.255.255/", "carrier-grade NAT", false},
		{"http://100.128.0.1/", "", false},
		{"http://224.0.0.1/", "multicast", false},
		{"http://255.255.255.255/", "reserved", false},
		{"http://[64:ff9b::a00:1]/", "carries the IPv4 address 10.0.0.1", false}, // NAT64
		{"http://[2002:7f00:1::]/", "carries the IPv4 address 127.0.0.1", false}, // 6to4
		{"http://[::a00:1]/", "carries the IPv4 address 10.0.0.1", false},        // IPv4-compatible
		{"http://[64:ff9b::5db8:d822]/", "", false},                              // NAT64 of a public address
		{"http://169.254.169.254/", "link-local", true},
		{"http://[fe80::1]/", "link-local", true},
		{"http://[fd00:ec2::254]/", "cloud metadata service", true},
		{"http://metadata.google.internal/", "cloud metadata service", true},
		{"http://0.0.0.0/", "this host", true},
		{"http://[::]/", "this host", true},
	} {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			err = g.CheckURL(u, AccessPublic)
			switch {
			case tt.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refusal != "" && (!errors.Is(err, ErrGuarded) || !strings.Contains(err.Error(), tt.refusal)):
				t.Fatalf("CheckURL = %v, want ErrGuarded saying %q", err, tt.refusal)
			}
			if err := g.CheckURL(u, AccessDefault); (err != nil) != tt.byDefault {
				t.Errorf("AccessDefault: %v, want refused %v", err, tt.byDefault)
			}
			if err := g.CheckURL(u, AccessAny); err != nil {
				t.Errorf("AccessAny refused it: %v", err)
			}
		})
	}
}

// --egress-allow admits the ranges it names for AccessPublic, and never what the guard's own
// rules refuse; --egress-https-only refuses http for every endpoint.
func TestEgressPolicy(t *testing.T) {
	g := &Guard{Egress: Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("169.254.0.0/16")}}}
	check := func(raw string, a Access) error {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return g.CheckURL(u, a)
	}
	if err := check("http://10.20.3.4/", AccessPublic); err != nil {
		t.Errorf("an allowed range: %v", err)
	}
	if err := check("http://10.21.3.4/", AccessPublic); err == nil {
		t.Error("outside the allowed range: accepted")
	}
	if err := check("http://169.254.169.254/", AccessPublic); err == nil {
		t.Error("--egress-allow admitted the metadata address")
	}
	if g.AccessOf(false, false) != AccessDefault || g.AccessOf(true, false) != AccessPublic || g.AccessOf(false, true) != AccessAny {
		t.Error("AccessOf without --egress-deny-private")
	}
	g.Egress.DenyPrivate = true
	if g.AccessOf(false, false) != AccessPublic || g.AccessOf(false, true) != AccessAny || g.AccessOf(true, true) != AccessPublic {
		t.Error("AccessOf with --egress-deny-private")
	}
	g.Egress.HTTPSOnly = true
	for _, a := range []Access{AccessDefault, AccessPublic, AccessAny} {
		if err := check("http://partner.example/", a); !errors.Is(err, ErrGuarded) || !strings.Contains(err.Error(), "--egress-https-only") {
			t.Errorf("https only, access %d: %v", a, err)
		}
		if err := check("https://partner.example/", a); err != nil {
			t.Errorf("https only, access %d, an https URL: %v", a, err)
		}
	}
}

func TestRowEgressColumns(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Row)
		reason string
	}{
		{"deny_private with allow_private_url", func(r *Row) { r.DenyPrivate, r.AllowPrivateURL = true, true }, "an operator clears deny_private first"},
		{"deny_private and a private URL", func(r *Row) { r.DenyPrivate, r.URL = true, "http://10.0.0.1/" }, "10.0.0.1 is private"},
		{"a proxy with a path", func(r *Row) { r.EgressProxy = "http://proxy:3128/x" }, "a path"},
		{"a proxy with a password", func(r *Row) { r.EgressProxy = "http://u:hunter2@proxy:3128" }, "user:password"},
		{"a socks proxy", func(r *Row) { r.EgressProxy = "socks5://proxy:1080" }, "not http or https"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := validRow()
			tt.change(&r)
			err := r.Validate(nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("Validate = %v, want ErrInvalid saying %q", err, tt.reason)
			}
		})
	}
	for _, p := range []string{"", "direct", "http://proxy.internal:3128", "https://proxy.internal/"} {
		r := validRow()
		r.EgressProxy = p
		if err := r.Validate(nil); err != nil {
			t.Errorf("egress_proxy %q: %v", p, err)
		}
	}
}

func validRow() Row {
	return Row{ID: "acme", URL: "https://acme.example/hooks", Secrets: []Secret{{Value: "0123456789abcdef0123456789abcdef"}},
		Scheme: "x-signature", Format: FormatRaw, BatchMaxEvents: 1, BatchMaxBytes: DefaultBatchMaxBytes,
		EventTypes: []string{"*"}, State: Enabled}
}
