// Package natstest runs real NATS servers with JetStream in the test process (the
// nats-server module) on temp dirs, and reads streams back for the checks.
package natstest

import (
	"context"
	"fmt"
	"net"
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
// comma-separated list for a cluster).
func ReadStream(ctx context.Context, t testing.TB, url, stream string) []Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("read stream: connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var st jetstream.Stream
	for {
		st, err = js.Stream(ctx, stream)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("read stream %s: %v", stream, err)
	}
	last := info.State.LastSeq
	var out []Msg
	if last == 0 {
		return out
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("read stream %s: %v", stream, err)
	}
	for len(out) == 0 || out[len(out)-1].Seq < last {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("read stream %s: %v", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, Msg{Seq: md.Sequence.Stream, Subject: m.Subject(), Data: m.Data(), Header: m.Headers()})
			n++
		}
		if batch.Error() != nil && n == 0 {
			t.Fatalf("read stream %s: %v (read %d of %d)", stream, batch.Error(), len(out), last)
		}
		if ctx.Err() != nil {
			t.Fatalf("read stream %s: %v (read %d of %d)", stream, ctx.Err(), len(out), last)
		}
	}
	return out
}
