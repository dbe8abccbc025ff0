// Package natstest runs real NATS servers with JetStream in the test process (the
// nats-server module) on temp dirs, and reads streams back for the checks.
//
// It does what nats-server's own cluster tests do (server/jetstream_helpers_test.go) where a
// node is stopped and started again: every node keeps fixed ports chosen below the kernel's
// ephemeral range, so that while it is down no other process's outgoing connection or bind(0)
// can take them, and a restarted node is waited for until it is healthy (JetStream current),
// not only listening. Reads use one consumer per read, created and deleted within the read's
// context, so a read never outlives its context nor loads a cluster that is electing leaders.
package natstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
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

// StablePort returns a TCP port free on 127.0.0.1 now and below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), for a server that is stopped and started again on it: a port
// from FreePort is in that range, where any process's outgoing connection or bind(0) may take it
// while the server is down. nats-server's cluster tests refuse ports in that range for the
// same reason.
func StablePort(t testing.TB) int {
	t.Helper()
	lo := ephemeralLow()
	if lo <= stableMin+1000 {
		return FreePort(t) // no room below the range: the risk stays, the test still runs
	}
	for range 1000 {
		port := stableMin + rand.IntN(lo-stableMin)
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatalf("no free port between %d and %d", stableMin, lo)
	return 0
}

// stableMin is the lowest port StablePort hands out: above the well-known and the usual
// registered service ports.
const stableMin = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (32768 unless configured).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// Start starts a single-node server storing in a new temp dir; Cleanup shuts it down.
func Start(t testing.TB) *Server {
	t.Helper()
	o := server.Options{Host: "127.0.0.1", Port: StablePort(t), JetStream: true, StoreDir: t.TempDir(),
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

// Shutdown stops the server: its clients' connections drop, and (as nats-server's Shutdown
// does) its raft leaderships are handed to peers first. It may be called more than once.
func (s *Server) Shutdown() {
	if s.s != nil {
		s.s.Shutdown()
		s.s.WaitForShutdown()
		s.s = nil
	}
}

// Restart starts the server (again) on the same ports and store, and waits until it is
// healthy: it accepts connections and its JetStream is current (in a cluster: it has caught up
// with its peers), as nats-server's tests wait after restarting a node.
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
	s.waitHealthy(2 * time.Minute)
}

// waitHealthy waits until the server's health check (JetStream included) says ok.
func (s *Server) waitHealthy(limit time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		hs := s.s.Healthz(nil)
		if hs.Status == "ok" && hs.Error == "" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server %s not healthy after %s: %s", s.opts.ServerName, limit, hs.Error)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		msgs, err := TryReadStream(actx, url, stream)
		cancel()
		if err == nil {
			return msgs
		}
		if ctx.Err() != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TryReadStream is one attempt of ReadStream: an error when the stream cannot be read now. It
// returns by ctx's deadline (10s if ctx has none). See Reader, which it uses once.
func TryReadStream(ctx context.Context, url, stream string) ([]Msg, error) {
	return (&Reader{URL: url, Stream: stream}).Read(ctx)
}

// Reader reads a stream that only grows (nothing deleted or purged) in attempts that each keep
// what they read, so that repeated attempts finish however slow the cluster is: an attempt
// that runs out of time costs only itself, and the next goes on from the last message read.
// (Each attempt of a reader that starts over can need longer than its budget, under load, for
// ever.) Each attempt returns by its context and reads through one ephemeral consumer, deleted
// at the end. (The harness used to Fetch from an ordered consumer, which makes a new consumer
// for every Fetch, leaves the last one for five minutes, and retries a failed creation forever
// whatever the context: under load, while a cluster re-elected its leaders, reads piled up
// consumer creations and never finished.) A Reader is safe for use by one goroutine at a time.
type Reader struct {
	URL    string // one URL, or a comma-separated list for a cluster
	Stream string
	msgs   []Msg
}

// Read returns every message of the stream up to its last sequence when the attempt began, or
// an error (the messages read meanwhile are kept for the next attempt). It returns by ctx's
// deadline (10s if ctx has none).
func (r *Reader) Read(ctx context.Context) ([]Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	nc, err := nats.Connect(r.URL, nats.Timeout(max(min(2*time.Second, time.Until(deadline)), 100*time.Millisecond)))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, r.Stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	if r.next() > last {
		return slices.Clone(r.msgs), nil
	}
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: r.next(), MemoryStorage: true,
		Replicas: 1, InactiveThreshold: time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.DeleteConsumer(dctx, c.CachedInfo().Name)
	}()
	for r.next() <= last {
		wait := min(5*time.Second, time.Until(deadline))
		if wait < 100*time.Millisecond {
			return nil, fmt.Errorf("read %d of %d: %w", r.next()-1, last, context.DeadlineExceeded)
		}
		// No more than the stream holds past what was read, so the last batch does not wait
		// out FetchMaxWait for messages that will not come.
		batch, err := c.Fetch(int(min(500, last-r.next()+1)), jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			r.msgs = append(r.msgs, Msg{Seq: md.Sequence.Stream, Subject: m.Subject(), Data: m.Data(), Header: m.Headers()})
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("read %d of %d: %v", r.next()-1, last, batch.Error())
		}
	}
	return slices.Clone(r.msgs), nil
}

// next is the sequence the next message read must have.
func (r *Reader) next() uint64 {
	if len(r.msgs) == 0 {
		return 1
	}
	return r.msgs[len(r.msgs)-1].Seq + 1
}

// Cluster is n servers forming one JetStream cluster, each with its own store.
type Cluster []*Server

// StartCluster starts an n-node JetStream cluster on 127.0.0.1 and waits until it has a
// JetStream meta leader.
func StartCluster(t testing.TB, n int) Cluster {
	t.Helper()
	clientPorts, routePorts := make([]int, n), make([]int, n)
	used := map[int]bool{}
	for i := range n {
		for _, p := range []*int{&clientPorts[i], &routePorts[i]} {
			for *p == 0 || used[*p] {
				*p = StablePort(t)
			}
			used[*p] = true
		}
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
	c.waitReady(t, 60*time.Second)
	return c
}

// waitReady waits, as nats-server's waitOnClusterReady does, until a meta leader knows every
// node as a peer, then until every node is healthy.
func (c Cluster) waitReady(t testing.TB, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !c.formed() {
		if time.Now().After(deadline) {
			t.Fatalf("the JetStream cluster has no meta leader with all %d peers after %s", len(c), limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range c {
		s.waitHealthy(time.Until(deadline))
	}
}

func (c Cluster) formed() bool {
	for _, s := range c {
		if s.s != nil && s.s.JetStreamIsLeader() && len(s.s.JetStreamClusterPeers()) == len(c) {
			return true
		}
	}
	return false
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
