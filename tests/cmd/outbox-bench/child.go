package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a subprocess the bench started: the relay or the receiver. Its stderr is kept (the
// tail) for error messages; Stop ends it with SIGTERM, then SIGKILL after a grace period.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	done   chan struct{} // closed when the process has exited and been waited for
	err    error         // Wait's result, valid after done
}

// startChild starts cmd; its stderr is kept (the tail) and also written to each of also.
func startChild(name string, cmd *exec.Cmd, also ...io.Writer) (*child, error) {
	c := &child{name: name, cmd: cmd, stderr: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd.Stderr = io.MultiWriter(append([]io.Writer{c.stderr}, also...)...)
	// The bench dying (even by SIGKILL) takes its children with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports, without blocking, whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// failure describes an unexpected exit, with the end of the child's stderr.
func (c *child) failure() error {
	return fmt.Errorf("%s exited early (%v); its stderr ends:\n%s", c.name, c.err, c.stderr)
}

// Stop asks the process to end (SIGTERM) and waits; after grace it is killed. Safe to call
// more than once.
func (c *child) Stop(grace time.Duration) error {
	if c.exited() {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", c.name, grace)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// receiverProc is the receiver subprocess and a client of its control endpoints.
type receiverProc struct {
	*child
	base   string // http://host:port
	client *http.Client
}

// startReceiver runs `<self> receiver` and waits for the address it listens on. self is this
// program (under `go test`, the test binary, whose TestMain answers the same subcommand).
func startReceiver(ctx context.Context, secret string) (*receiverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(self, "receiver", "--addr", "127.0.0.1:0", "--secret", secret)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c, err := startChild("receiver", cmd)
	if err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		addr <- strings.TrimSpace(strings.TrimPrefix(line, "listening "))
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-addr:
		if _, _, err := net.SplitHostPort(a); err != nil {
			_ = c.Stop(time.Second)
			return nil, fmt.Errorf("receiver did not report its address: %w\n%s", err, c.stderr)
		}
		return &receiverProc{child: c, base: "http://" + a, client: &http.Client{Timeout: 30 * time.Second}}, nil
	case <-ctx.Done():
		_ = c.Stop(time.Second)
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		_ = c.Stop(time.Second)
		return nil, fmt.Errorf("receiver did not start within 30s:\n%s", c.stderr)
	}
}

func (r *receiverProc) hookURL() string { return r.base + "/hook" }

// endpointURL is the URL prefix of the endpoints: endpoint id E posts to endpointURL() + E.
func (r *receiverProc) endpointURL() string { return r.base + "/ep/" }

func (r *receiverProc) Reset(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/reset", nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("reset receiver: %w", err)
	}
	resp.Body.Close()
	return nil
}

func (r *receiverProc) Stats(ctx context.Context) (receiverStats, error) {
	var s receiverStats
	return s, r.getJSON(ctx, "/stats", &s)
}

// PerEndpoint returns the distinct deliveries each endpoint received (POST /ep/{id}).
func (r *receiverProc) PerEndpoint(ctx context.Context) (map[string]int64, error) {
	m := map[string]int64{}
	return m, r.getJSON(ctx, "/endpoints", &m)
}

// Failures returns what each failing endpoint was sent (POST /fail/{id}).
func (r *receiverProc) Failures(ctx context.Context) (map[string]failures, error) {
	m := map[string]failures{}
	return m, r.getJSON(ctx, "/failures", &m)
}

func (r *receiverProc) Arrivals(ctx context.Context) (map[string]int64, error) {
	m := map[string]int64{}
	return m, r.getJSON(ctx, "/arrivals", &m)
}

func (r *receiverProc) getJSON(ctx context.Context, path string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("receiver %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receiver %s: status %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitUnique polls the receiver until it has want distinct events. It fails if the relay (if
// given) exits, or if the count does not move for stall.
func (r *receiverProc) waitUnique(ctx context.Context, want int, relay *child, stall time.Duration) (receiverStats, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastCount, lastMove := -1, time.Now()
	for {
		s, err := r.Stats(ctx)
		if err != nil {
			return s, err
		}
		if s.Unique >= want {
			return s, nil
		}
		if s.Unique != lastCount {
			lastCount, lastMove = s.Unique, time.Now()
		}
		switch {
		case relay != nil && relay.exited():
			return s, relay.failure()
		case time.Since(lastMove) > stall:
			msg := fmt.Sprintf("receiver stuck at %d of %d events for %s (bad signatures %d)", s.Unique, want, stall, s.BadSignatures)
			if relay != nil {
				msg += "; relay stderr ends:\n" + relay.stderr.String()
			}
			return s, errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-tick.C:
		}
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string, c *child, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		if c.exited() {
			return c.failure()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v; stderr ends:\n%s", c.name, limit, err, c.stderr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
