package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// relayPackage is what buildRelay compiles, as `make build` would.
const relayPackage = "github.com/outbox-relay/outbox-relay/cmd/outbox-relay"

// buildRelay compiles the relay into dir and returns the binary's path.
func buildRelay(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to build the relay with (put it on PATH, or set TORTURE_RELAY to a relay binary): %w", err)
	}
	out := filepath.Join(dir, "outbox-relay")
	if b, err := exec.CommandContext(ctx, goBin, "build", "-o", out, relayPackage).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w (run from inside the repository, as `make torture` does, "+
			"or set TORTURE_RELAY to a relay binary)\n%s", relayPackage, err, b)
	}
	return out, nil
}

// relayProc is one `outbox-relay run` process.
type relayProc struct {
	id      int
	cmd     *exec.Cmd
	addr    string // its /metrics, /healthz, /readyz
	logPath string
	done    chan struct{} // closed once it has exited and been waited for
	err     error         // Wait's result, valid after done
	ours    bool          // we signalled it: its exit is expected
	// startedAt and exitedAt (valid after done) place it in a failed run's evidence.
	startedAt, exitedAt time.Time
}

func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// fleet runs the relay processes that share the slot: one streams, the others stand by.
type fleet struct {
	bin  string
	args []string
	dir  string // where each process's log goes
	http *http.Client

	mu      sync.Mutex
	procs   []*relayProc
	next    int
	crashes []string // exits we did not cause
	// kills are the processes SIGKILLed (and those that crashed), by when they exited: the
	// done-marks they held were dropped (pending.go).
	kills []killed
}

// killed is a relay process that ended without flushing what it held.
type killed struct {
	Relay int
	At    time.Time
	What  string
}

// killList returns the processes killed (or crashed) so far.
func (f *fleet) killList() []killed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]killed(nil), f.kills...)
}

func newFleet(bin, dir string, args []string) *fleet {
	return &fleet{bin: bin, dir: dir, args: args, http: &http.Client{Timeout: time.Second}}
}

// relayReplicationTimeout is the relays' --replication-timeout: short, so that a partition
// fault is noticed within seconds.
const relayReplicationTimeout = 2 * time.Second

// relayArgs are the relay's flags in every run: a 1s request timeout (the hang fault holds
// requests past it), quick retries, no dead-lettering (a parked event would look lost), a
// status update at least every second, so that SIGTERM is noticed promptly, and a short
// replication timeout. dsn points at the harness's freeze proxy.
func relayArgs(dsn, url, secret, slot string) []string {
	return []string{"run", "--dsn", dsn, "--webhook-url", url, "--webhook-secret", secret,
		"--slot", slot, "--publication", slot, "--request-timeout", "1s", "--retry-min", "20ms",
		"--retry-max", "1s", "--max-attempts", "-1", "--status-interval", "1s", "--shutdown-timeout", "5s",
		"--replication-timeout", relayReplicationTimeout.String(), "--log-format", "json", "--log-level", "info"}
}

// endpointArgs are relayArgs for an endpoints run: --endpoints instead of one webhook, each
// endpoint's URL and secret coming from its row, and a short --spill-after (the torture's
// spillAfter) so that a blacked-out endpoint spills to its backlog within the run.
func endpointArgs(dsn, slot string, spillAfter time.Duration) []string {
	return []string{"run", "--endpoints", "--dsn", dsn, "--spill-after", spillAfter.String(),
		"--slot", slot, "--publication", slot, "--request-timeout", "1s", "--retry-min", "20ms",
		"--retry-max", "1s", "--max-attempts", "-1", "--status-interval", "1s", "--shutdown-timeout", "5s",
		"--replication-timeout", relayReplicationTimeout.String(), "--log-format", "json", "--log-level", "info"}
}

// start launches one more relay. Its stdout and stderr go to relay-<n>.log.
func (f *fleet) start() (*relayProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.next++
	id := f.next
	f.mu.Unlock()
	p := &relayProc{id: id, addr: addr, logPath: filepath.Join(f.dir, fmt.Sprintf("relay-%d.log", id)),
		done: make(chan struct{}), startedAt: time.Now()}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(f.bin, append(append([]string(nil), f.args...), "--metrics-addr", addr)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// This process dying, even by SIGKILL, takes its relays with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start relay: %w", err)
	}
	go func() { p.err = p.cmd.Wait(); p.exitedAt = time.Now(); logf.Close(); close(p.done) }()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p, nil
}

// pids maps the OS pid of every process that has not exited to its id.
func (f *fleet) pids() map[int]int {
	out := map[int]int{}
	for _, p := range f.alive() {
		out[p.cmd.Process.Pid] = p.id
	}
	return out
}

// all returns every process started, oldest first.
func (f *fleet) all() []*relayProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*relayProc(nil), f.procs...)
}

// alive returns the processes that have not exited, oldest first.
func (f *fleet) alive() []*relayProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*relayProc
	for _, p := range f.procs {
		if !p.exited() {
			out = append(out, p)
		}
	}
	return out
}

// streaming reports whether p says it holds the slot (/readyz answers 200 only then).
func (f *fleet) streaming(ctx context.Context, p *relayProc) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// leader returns the process that streams, or nil.
func (f *fleet) leader(ctx context.Context) *relayProc {
	for _, p := range f.alive() {
		if f.streaming(ctx, p) {
			return p
		}
	}
	return nil
}

// waitLeader waits until some process streams.
func (f *fleet) waitLeader(ctx context.Context, limit time.Duration) (*relayProc, error) {
	deadline := time.Now().Add(limit)
	for {
		if p := f.leader(ctx); p != nil {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no relay streams after %s", limit)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// crashList returns the exits we did not cause, so far.
func (f *fleet) crashList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.crashes...)
}

// started returns how many processes were started.
func (f *fleet) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next
}

// kill SIGKILLs p and waits for it.
func (f *fleet) kill(p *relayProc) {
	f.mu.Lock()
	p.ours = true
	f.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	f.mu.Lock()
	f.kills = append(f.kills, killed{Relay: p.id, At: p.exitedAt, What: fmt.Sprintf("relay-%d SIGKILLed", p.id)})
	f.mu.Unlock()
}

// reap forgets processes that exited, recording those we did not end as crashes, and returns
// how many are left.
func (f *fleet) reap() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.procs[:0]
	for _, p := range f.procs {
		if !p.exited() {
			kept = append(kept, p)
			continue
		}
		if !p.ours {
			f.crashes = append(f.crashes, fmt.Sprintf("relay-%d exited on its own (%v); its log ends:\n%s",
				p.id, p.err, tail(p.logPath, 15)))
			f.kills = append(f.kills, killed{Relay: p.id, At: p.exitedAt, What: fmt.Sprintf("relay-%d crashed", p.id)})
		}
	}
	f.procs = kept
	return len(kept)
}

// stop sends SIGTERM to every process and waits up to grace for each; what is still running
// then is killed. It returns a line per process that did not exit 0 in time.
func (f *fleet) stop(grace time.Duration) []string {
	f.reap()
	f.mu.Lock()
	procs := append([]*relayProc(nil), f.procs...)
	f.mu.Unlock()
	// A relay started a moment ago (a failover's new standby) may not have installed its
	// signal handler yet; SIGTERM would then end it as an unclean exit that says nothing about
	// the relay. Its metrics listener is up once it runs, so wait for that first (bounded).
	for _, p := range procs {
		p.waitListening(5 * time.Second)
	}
	f.mu.Lock()
	for _, p := range procs {
		p.ours = true
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	f.mu.Unlock()
	var bad []string
	deadline := time.After(grace)
	for _, p := range procs {
		select {
		case <-p.done:
			if p.err != nil {
				bad = append(bad, fmt.Sprintf("relay-%d: SIGTERM: exit %v; its log ends:\n%s", p.id, p.err, tail(p.logPath, 10)))
			}
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.done
			bad = append(bad, fmt.Sprintf("relay-%d did not exit within %s of SIGTERM; its log ends:\n%s",
				p.id, grace, tail(p.logPath, 10)))
		}
	}
	f.reap()
	return bad
}

// waitListening waits up to limit until p's metrics address accepts connections, or p exits.
func (p *relayProc) waitListening(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return
		default:
		}
		if c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killAll SIGKILLs whatever still runs. Safe to call more than once.
func (f *fleet) killAll() {
	f.mu.Lock()
	procs := append([]*relayProc(nil), f.procs...)
	for _, p := range procs {
		p.ours = true
	}
	f.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
