package relaytest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// FakeDNS returns a resolver whose server answers the A queries of the names in hosts (without
// the final dot) with their IPv4 address, and every other query with no answer: names that
// resolve where a test says, through Go's real resolver path (the lookup, then a dial to each
// address), as DNS rebinding would make them resolve.
func FakeDNS(hosts map[string]string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go serveDNS(server, hosts)
		return client, nil
	}}
}

// serveDNS answers length-prefixed queries (DNS over a stream) until the client goes away.
func serveDNS(c net.Conn, hosts map[string]string) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		out, err := dnsAnswer(msg, hosts)
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(n[:], uint16(len(out)))
		if _, err := c.Write(append(n[:], out...)); err != nil {
			return
		}
	}
}

func dnsAnswer(query []byte, hosts map[string]string) ([]byte, error) {
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
	addr, ok := hosts[strings.TrimSuffix(q.Name.String(), ".")]
	if ip, err := netip.ParseAddr(addr); ok && err == nil && ip.Is4() && q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1}
		if err := b.AResource(rh, dnsmessage.AResource{A: ip.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
