package endpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestGuardCheckURL(t *testing.T) {
	g, err := NewGuard(":9187")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		url, refusal string // refusal "": allowed
	}{
		{"https://partner.example/hooks", ""},
		{"http://127.0.0.1:8080/hooks", ""},
		{"http://10.0.0.5/hooks", ""},
		{"https://partner.example:9187/hooks", ""},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"},
		{"http://169.254.170.2/v2/credentials", "link-local"},
		{"http://[fe80::1]/", "fe80::1 is link-local"},
		{"http://[fe80::1%25eth0]/", "link-local"},
		{"http://[::ffff:169.254.169.254]/", "169.254.169.254 is link-local"},
		{"http://2852039166/", "169.254.169.254 is link-local"},
		{"http://0xa9.0xfe.0xa9.0xfe/", "169.254.169.254 is link-local"},
		{"http://0251.0376.0251.0376/", "169.254.169.254 is link-local"},
		{"http://169.254.43518/", "169.254.169.254 is link-local"},
		{"http://[fd00:ec2::254]/", "cloud metadata service"},
		{"http://100.100.100.200/", "cloud metadata service"},
		{"http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal is a cloud metadata service"},
		{"http://METADATA.google.internal./", "cloud metadata service"},
		{"http://metadata/", "cloud metadata service"},
		{"http://0.0.0.0:8080/", "this host"},
		{"http://[::]:8080/", "this host"},
		{"http://0/", "this host"},
		{"http://127.0.0.1:9187/metrics", "127.0.0.1:9187 is the relay's own metrics address"},
		{"http://localhost:9187/metrics", "the relay's own metrics address"},
		{"http://[::1]:9187/", "the relay's own metrics address"},
		{"http://127.0.0.2:9187/", "the relay's own metrics address"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			err = g.CheckURL(u, AccessDefault)
			switch {
			case tt.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refusal != "" && (!errors.Is(err, ErrGuarded) || !strings.Contains(err.Error(), tt.refusal)):
				t.Fatalf("CheckURL = %v, want ErrGuarded saying %q", err, tt.refusal)
			case tt.refusal != "" && !strings.Contains(err.Error(), "--allow-private-url"):
				t.Fatalf("the refusal does not say how to allow it: %v", err)
			}
		})
	}
}

func TestNewGuardMetricsAddress(t *testing.T) {
	for _, bad := range []string{"9187", ":http", ":0", "relay.internal:9187"} {
		if _, err := NewGuard(bad); err == nil {
			t.Errorf("NewGuard(%q) accepted it", bad)
		}
	}
	g, err := NewGuard("10.1.2.3:9187")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr string
		want bool
	}{{"10.1.2.3:9187", true}, {"127.0.0.1:9187", true}, {"10.1.2.4:9187", false}, {"10.1.2.3:9188", false}} {
		ap := netip.MustParseAddrPort(tt.addr)
		if got := g.CheckAddr(ap.Addr(), int(ap.Port()), AccessDefault) != nil; got != tt.want {
			t.Errorf("metrics at 10.1.2.3:9187: CheckAddr(%s) refused = %v, want %v", tt.addr, got, tt.want)
		}
	}
	var zero Guard
	if err := zero.CheckAddr(netip.MustParseAddr("127.0.0.1"), 9187, AccessDefault); err != nil {
		t.Errorf("the zero guard knows no metrics address, yet refused: %v", err)
	}
}

// The dial-time check refuses what a name resolves to when the connection is made: a name that
// passed CheckURL and later resolves to a metadata address (DNS rebinding) is not reached.
func TestGuardControlRefusesAtDialTime(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	metrics, err := NewGuard("127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	open := &Guard{}
	u, _ := url.Parse("http://partner.example:" + strconv.Itoa(port) + "/")
	if err := metrics.CheckURL(u, AccessDefault); err != nil {
		t.Fatalf("CheckURL refused a plain name: %v", err)
	}
	for _, tt := range []struct {
		name       string
		g          *Guard
		resolvesTo string
		access     Access
		refused    bool
	}{
		{"a name resolving to a plain address connects", open, "127.0.0.1", AccessDefault, false},
		{"a name rebound to the metadata address", open, "169.254.169.254", AccessDefault, true},
		{"a name resolving to the relay's metrics address", metrics, "127.0.0.1", AccessDefault, true},
		{"allow_private_url lets it through", metrics, "127.0.0.1", AccessAny, false},
		{"a tenant's endpoint: a name rebound to loopback", open, "127.0.0.1", AccessPublic, true},
		{"a tenant's endpoint: loopback admitted by --egress-allow", &Guard{Egress: Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}, "127.0.0.1", AccessPublic, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := net.Dialer{Timeout: 5 * time.Second, Control: tt.g.Control(tt.access), Resolver: fakeDNS(t, tt.resolvesTo)}
			c, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort("partner.example", strconv.Itoa(port)))
			if c != nil {
				c.Close()
			}
			switch {
			case tt.refused && !errors.Is(err, ErrGuarded):
				t.Fatalf("dial = %v, want ErrGuarded", err)
			case !tt.refused && err != nil:
				t.Fatalf("dial = %v, want a connection", err)
			}
		})
	}
}

// fakeDNS is a resolver whose server answers every A query with addr.
func fakeDNS(t *testing.T, addr string) *net.Resolver {
	ip := netip.MustParseAddr(addr).As4()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			for {
				var n [2]byte // a conn that is not a PacketConn speaks DNS over TCP: length-prefixed
				if _, err := io.ReadFull(server, n[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(server, msg); err != nil {
					return
				}
				out, err := answer(msg, ip)
				if err != nil {
					t.Errorf("fake DNS: %v", err)
					return
				}
				binary.BigEndian.PutUint16(n[:], uint16(len(out)))
				if _, err := server.Write(append(n[:], out...)); err != nil {
					return
				}
			}
		}()
		return client, nil
	}}
}

func answer(query []byte, ip [4]byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1}
		if err := b.AResource(rh, dnsmessage.AResource{A: ip}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
