// Package natstest runs real NATS servers with JetStream in the test process (the
// nats-server module) on temp dirs, and reads streams back for the checks.
package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is one nats-server with JetStream and file storage in Dir, on a fixed port so that a
// restart comes back at the same URL.
type Server struct {
	t    testing.TB
	opts server.Options
	s    *server.Server
}

// FreePort returns a TCP port free on 127.0.0.1 now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start starts a single-node server storing in a new temp dir; Cleanup shuts it down.
func Start(t testing.TB) *Server {
	t.Helper()
	o := server.Options{Host: "127.0.0.1", Port: FreePort(t), JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, ServerName: "n1"}
	return StartWith(t, o)
}

// StartWith starts a server with o (the caller sets JetStream, StoreDir, the port).
func StartWith(t testing.TB, o server.Options) *Server {
	t.Helper()
	srv := &Server{t: t, opts: o}
	srv.Restart()
	t.Cleanup(srv.Shutdown)
	return srv
}

// URL is the client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port) }

// Shutdown stops the server as a crash would for its clients (their connections drop); it may be
// called more than once.
func (s *Server) Shutdown() {
	if s.s != nil {
		s.s.Shutdown()
		s.s.WaitForShutdown()
		s.s = nil
	}
}

// Restart starts the server (again) on the same port and store, and waits until it accepts
// connections.
func (s *Server) Restart() {
	s.t.Helper()
	s.Shutdown()
	o := s.opts
	ns, err := server.NewServer(&o)
	if err != nil {
		s.t.Fatalf("nats-server: %v", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		s.t.Fatalf("nats-server %s not ready", o.ServerName)
	}
	s.s = ns
}

// Running reports whether the server is up.
func (s *Server) Running() bool { return s.s != nil }

// Msg is one stored message.
type Msg struct {
	Seq     uint64
	Subject string
	Data    []byte
	Header  nats.Header
}

// ReadStream returns every message of stream in stream order, connecting to url (a
// comma-separated list for a cluster). A read that fails (a leader election under way) is
// started again until ctx ends.
func ReadStream(ctx context.Context, t testing.TB, url, stream string) []Msg {
	t.Helper()
	for {
		msgs, err := TryReadStream(ctx, url, stream)
		if err == nil {
			return msgs
		}
		if ctx.Err() != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TryReadStream is one attempt of ReadStream: an error when the stream cannot be read now.
func TryReadStream(ctx context.Context, url, stream string) ([]Msg, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	var out []Msg
	if last == 0 {
		return out, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for len(out) == 0 || out[len(out)-1].Seq < last {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, Msg{Seq: md.Sequence.Stream, Subject: m.Subject(), Data: m.Data(), Header: m.Headers()})
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("read %d of %d: %v", len(out), last, batch.Error())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// Cluster is n servers forming one JetStream cluster, each with its own store.
type Cluster []*Server

// StartCluster starts an n-node JetStream cluster on 127.0.0.1 and waits until it has a
// JetStream meta leader.
func StartCluster(t testing.TB, n int) Cluster {
	t.Helper()
	clientPorts, routePorts := make([]int, n), make([]int, n)
	for i := range n {
		clientPorts[i], routePorts[i] = FreePort(t), FreePort(t)
	}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := make(Cluster, 0, n)
	for i := range n {
		o := server.Options{Host: "127.0.0.1", Port: clientPorts[i], JetStream: true, StoreDir: t.TempDir(),
			NoLog: true, NoSigs: true, ServerName: fmt.Sprintf("n%d", i+1),
			Cluster: server.ClusterOpts{Name: "outbox", Host: "127.0.0.1", Port: routePorts[i]}, Routes: routes}
		srv := &Server{t: t, opts: o}
		ns, err := server.NewServer(&srv.opts)
		if err != nil {
			t.Fatalf("nats-server: %v", err)
		}
		ns.Start()
		srv.s = ns
		t.Cleanup(srv.Shutdown)
		c = append(c, srv)
	}
	for _, s := range c {
		if !s.s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("nats-server %s not ready", s.opts.ServerName)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, s := range c {
			if s.s != nil && s.s.JetStreamIsLeader() {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the JetStream cluster elected no meta leader within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL lists every node's client URL, comma-separated.
func (c Cluster) URL() string {
	urls := make([]string, len(c))
	for i, s := range c {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// StreamLeader returns the node leading stream, or nil when none does (yet).
func (c Cluster) StreamLeader(stream string) *Server {
	for _, s := range c {
		if s.s == nil {
			continue
		}
		if s.s.JetStreamIsStreamLeader("$G", stream) {
			return s
		}
	}
	return nil
}
