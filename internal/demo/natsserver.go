package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/fetch"
)

// NATSInstallHint is the command that installs nats-server on Debian and Ubuntu (2.9.10 on
// Debian 12, which has all the demo needs).
const NATSInstallHint = "apt-get install -y nats-server"

// NATSServerEnv names the nats-server binary when it is not on PATH.
const NATSServerEnv = "NATS_SERVER_BIN"

// ErrNoNATSServer is wrapped by the error of Run with NATS set when there is no nats-server
// binary to start.
var ErrNoNATSServer = errors.New("no nats-server binary")

// NATSServerBin returns the nats-server binary Run starts with NATS set: $NATS_SERVER_BIN if
// set, else nats-server on PATH, else the Debian package's, else one built from the Go module
// this repository already requires (package fetch: cached, built once per machine and version,
// saying so in one line on stderr). Its error names the fix and wraps ErrNoNATSServer.
func NATSServerBin() (string, error) { return natsServerBin(context.Background()) }

func natsServerBin(ctx context.Context) (string, error) {
	if p := os.Getenv(NATSServerEnv); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s is not an executable (%v): point it at nats-server, or unset it and install the binary with `%s`",
				ErrNoNATSServer, NATSServerEnv, p, err, NATSInstallHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	// The Debian package installs it in /usr/sbin, which is not on a normal user's PATH.
	if p := fetch.SystemPath(debianNATSServer); isExecutable(p) {
		return p, nil
	}
	p, err := fetch.NATSServer(ctx)
	if err != nil {
		return "", fmt.Errorf("%w on PATH or in /usr/sbin for --nats (%v): install it with `%s`, or set %s to its path",
			ErrNoNATSServer, err, NATSInstallHint, NATSServerEnv)
	}
	return p, nil
}

// debianNATSServer is where the Debian package puts the binary.
const debianNATSServer = "/usr/sbin/nats-server"

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// natsStopSignal is how a broker outage stops the server: SIGKILL, no chance to flush or say
// goodbye to its clients, as in a crash.
const natsStopSignal = syscall.SIGKILL

// natsServer is a real nats-server process with JetStream, on a fixed loopback port and a
// store directory of its own, which it keeps across restarts. It implements the outages'
// fault: SetFailing(true) kills it, SetFailing(false) starts it again.
type natsServer struct {
	bin, dir string
	port     int
	log      *logTail // the server's output, for the error when it does not start

	mu   sync.Mutex
	cmd  *exec.Cmd     // the running process; nil once stop took it
	done chan struct{} // closed when cmd has exited and was reaped
	down bool          // stopped on purpose

	// failed holds the first failure (a failed restart, an exit on its own) until the demo's
	// watch loop takes it and stops, or Close returns it.
	failed chan error
}

// startNATS starts nats-server in a new temporary directory on a free loopback port and waits
// until JetStream answers. Close stops it and removes the directory.
func startNATS(ctx context.Context, bin string) (*natsServer, error) {
	dir, err := os.MkdirTemp("", "outbox-relay-demo-nats-")
	if err != nil {
		return nil, fmt.Errorf("nats-server store dir: %w", err)
	}
	port, err := freePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &natsServer{bin: bin, dir: dir, port: port, log: newLogTail(20), failed: make(chan error, 1)}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// freePort asks the kernel for a loopback port no one listens on now. Another process could
// take it before the server binds it; the server's start then fails and says so.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("nats-server port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// URL is the server's client URL.
func (s *natsServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the process and waits until JetStream answers, the process exits, or ctx ends.
func (s *natsServer) start(ctx context.Context) error {
	cmd := exec.Command(s.bin, "-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Its own process group: Ctrl-C in the terminal stops the demo, which then drains before it
	// stops the server. Pdeathsig: a demo that dies takes its server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done, s.down = cmd, done, false
	s.mu.Unlock()
	go func() {
		defer close(done)
		err := cmd.Wait()
		s.mu.Lock()
		onItsOwn := s.cmd == cmd // stop takes cmd before it signals
		s.mu.Unlock()
		if onItsOwn {
			s.fail(fmt.Errorf("nats-server exited on its own (%v); its last output:\n%s", err, s.log.last(5)))
		}
	}()
	if err := s.waitReady(ctx, done); err != nil {
		// The error says it all, an exit while starting included: not again from Close.
		select {
		case <-s.failed:
		default:
		}
		return err
	}
	return nil
}

// waitReady waits until a client gets JetStream's account info, up to a minute.
func (s *natsServer) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		if last = s.ping(ctx); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("nats-server exited while starting (port %d, store %s); its output:\n%s", s.port, s.dir, s.log.String())
		case <-ctx.Done():
			return fmt.Errorf("nats-server on port %d not ready: %w (last: %v); its output:\n%s", s.port, ctx.Err(), last, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ping connects once and asks JetStream for the account's info.
func (s *natsServer) ping(ctx context.Context) error {
	nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// stop sends sig to the server and waits until it exited, killing it after 10s.
func (s *natsServer) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// SetFailing kills the server (on) or starts it again on the same port and store (off). A
// failed restart goes to failed, where the demo's watch loop sees it.
func (s *natsServer) SetFailing(on bool) {
	if on {
		s.mu.Lock()
		s.down = true
		s.mu.Unlock()
		s.stop(natsStopSignal)
		return
	}
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return
	}
	if err := s.start(context.Background()); err != nil {
		s.fail(fmt.Errorf("restart nats-server: %w", err))
	}
}

// fail reports err to the demo, unless a failure is already waiting.
func (s *natsServer) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// Failing reports whether the server is down on purpose.
func (s *natsServer) Failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Close stops the server (SIGTERM: it shuts down cleanly) and removes its directory. It
// returns a failure the demo has not taken yet, such as an exit on its own after the demo
// stopped watching.
func (s *natsServer) Close() error {
	s.stop(syscall.SIGTERM)
	var err error
	select {
	case err = <-s.failed: // not reported yet
	default:
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("remove the nats-server store %s: %w", s.dir, rerr))
	}
	return err
}
