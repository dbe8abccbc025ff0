package inbox

import (
	"errors"
	"net/http/httptest"
	"testing"
)

func TestAllowlistClient(t *testing.T) {
	allowed := []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7"}
	trusted := []string{"127.0.0.1/32", "172.16.0.0/12", "::1"}
	for _, c := range []struct {
		name    string
		trusted bool // configure the trusted proxies
		peer    string
		xff     []string
		allow   bool
	}{
		{"allowed peer", false, "10.1.2.3:5000", nil, true},
		{"allowed single address", false, "192.0.2.7:5000", nil, true},
		{"neighbour of a single address", false, "192.0.2.8:5000", nil, false},
		{"peer outside", false, "198.51.100.1:5000", nil, false},
		{"ipv6 allowed", false, "[2001:db8::1]:5000", nil, true},
		{"ipv6 outside", false, "[2001:db9::1]:5000", nil, false},
		{"ipv4-mapped ipv6", false, "[::ffff:10.1.2.3]:5000", nil, true},
		{"zone dropped", false, "[2001:db8::1%eth0]:5000", nil, true},
		{"xff ignored without trusted proxies", false, "127.0.0.1:5000", []string{"10.1.2.3"}, false},
		{"xff ignored from an untrusted peer", true, "198.51.100.1:5000", []string{"10.1.2.3"}, false},
		{"xff spoof from an allowed but untrusted peer", true, "10.9.9.9:5000", []string{"198.51.100.1"}, true},
		{"trusted proxy, allowed client", true, "127.0.0.1:5000", []string{"10.1.2.3"}, true},
		{"trusted proxy, client outside", true, "127.0.0.1:5000", []string{"198.51.100.1"}, false},
		{"right-most untrusted wins over a forged left entry", true, "127.0.0.1:5000", []string{"10.1.2.3, 198.51.100.1"}, false},
		{"forged left entry cannot help", true, "127.0.0.1:5000", []string{"198.51.100.1, 10.1.2.3"}, true},
		{"chain of trusted proxies skipped", true, "127.0.0.1:5000", []string{"10.1.2.3, 172.16.0.5", "172.20.0.1"}, true},
		{"chain of trusted proxies, client outside", true, "127.0.0.1:5000", []string{"198.51.100.1,172.16.0.5"}, false},
		{"every hop trusted: left-most counts", true, "127.0.0.1:5000", []string{"172.16.0.9, 172.16.0.5"}, false},
		{"trusted proxy without xff: the proxy itself", true, "127.0.0.1:5000", nil, false},
		{"garbage entry refused", true, "127.0.0.1:5000", []string{"10.1.2.3, not-an-ip"}, false},
		{"xff entry with port", true, "[::1]:5000", []string{"10.1.2.3:443"}, true},
		{"xff ipv6 in brackets", true, "[::1]:5000", []string{"[2001:db8::5]"}, true},
		{"peer not an address", false, "@", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr []string
			if c.trusted {
				tr = trusted
			}
			l, err := newAllowlist(allowed, tr)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("POST", "/", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			err = l.check(r)
			if c.allow && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.allow && !errors.Is(err, ErrForbidden) {
				t.Fatalf("allowed (err %v)", err)
			}
		})
	}
}

func TestAllowlistConfigErrors(t *testing.T) {
	for _, c := range []struct{ allowed, trusted []string }{
		{[]string{"10.0.0.0/33"}, nil},
		{[]string{"example.com"}, nil},
		{[]string{"10.0.0.0/8"}, []string{"10.0.0.0/x"}},
		{nil, []string{"127.0.0.1"}},
	} {
		if _, err := newAllowlist(c.allowed, c.trusted); err == nil {
			t.Errorf("newAllowlist(%q, %q) accepted", c.allowed, c.trusted)
		}
	}
	if l, err := newAllowlist(nil, nil); l != nil || err != nil {
		t.Errorf("empty lists: %v %v", l, err)
	}
}
