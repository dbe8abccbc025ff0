package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/demo"
)

func TestDemoFlags(t *testing.T) {
	t.Setenv(dsnFlag.env, "postgres://from-env/db")
	tests := []struct {
		name     string
		args     []string
		dsn      string
		rate     float64
		duration time.Duration
		usage    bool
		nats     bool
	}{
		{"defaults take DB_DSN", nil, "postgres://from-env/db", 50, 0, false, false},
		{"flags win over the environment", []string{"--dsn", "postgres://flag/db", "--rate", "200", "--duration", "1m"},
			"postgres://flag/db", 200, time.Minute, false, false},
		{"rate must be positive", []string{"--rate", "-1"}, "", 0, 0, true, false},
		{"duration must not be negative", []string{"--duration", "-1s"}, "", 0, 0, true, false},
		{"nats selects the broker", []string{"--nats"}, "postgres://from-env/db", 50, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newDemoCmd()
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := demoConfig(cmd.Flags())
			var ue usageError
			if tt.usage != errors.As(err, &ue) {
				t.Fatalf("err = %v, want usage error: %v", err, tt.usage)
			}
			if tt.usage {
				return
			}
			if cfg.DSN != tt.dsn || cfg.Rate != tt.rate || cfg.Duration != tt.duration || cfg.NATS != tt.nats {
				t.Errorf("got dsn=%q rate=%v duration=%v nats=%v", cfg.DSN, cfg.Rate, cfg.Duration, cfg.NATS)
			}
		})
	}
}

// Ctrl-C is how a user ends the demo: it must still drain, summarise and remove its cluster.
func TestDemoInterruptedLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	interruptDemo(t, false, "demo", "--rate", "100")
}

// With --nats, Ctrl-C in a terminal reaches the whole foreground process group: the demo still
// drains and summarises, and its nats-server is gone, its store removed, at the end. (The demo
// starts the server in its own group so that the signal does not stop it before the drain; this
// test cannot tell, as the drain is usually instant.)
func TestDemoNATSInterruptedLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	if _, err := demo.NATSServerBin(); err != nil {
		t.Fatalf("%v\nthis test runs the real nats-server, installed or built from the Go module", err)
	}
	out := strings.Join(interruptDemo(t, true, "demo", "--nats", "--rate", "100"), "\n")
	m := regexp.MustCompile(`nats-server at nats://(\S+) \(JetStream store in (\S+),`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo did not say where its nats-server is:\n%s", out)
	}
	if _, err := os.Stat(m[2]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nats-server store %s left behind", m[2])
	}
	// It answered during the run: the orders went through it.
	if conn, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		conn.Close()
		t.Errorf("something still listens at %s, where the demo's nats-server was", m[1])
	}
}

// interruptDemo runs the CLI with args until two progress lines, interrupts it (with group, as
// a terminal's Ctrl-C does: SIGINT to its whole process group), and checks the summary and
// that the cluster is gone. It returns the output.
func interruptDemo(t *testing.T, group bool, args ...string) []string {
	t.Helper()
	cmd := cliCommand(t, nil, args...)
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out []string
	var dir string
	var pid int
	clusterDir := regexp.MustCompile(`throwaway cluster in (\S+),`)
	timeout := time.After(time.Minute)
	for progress := 0; progress < 2; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo exited early: %v\n%s\n%s", cmd.Wait(), strings.Join(out, "\n"), stderr.String())
			}
			out = append(out, l)
			if m := clusterDir.FindStringSubmatch(l); m != nil {
				dir = m[1]
				b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
				if err != nil {
					t.Fatal(err)
				}
				pid, _ = strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
			}
			if strings.HasPrefix(l, "demo: t=") {
				progress++
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("no progress within a minute:\n%s", strings.Join(out, "\n"))
		}
	}
	if group {
		err = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	} else {
		err = cmd.Process.Signal(os.Interrupt)
	}
	if err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		out = append(out, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo after Ctrl-C: %v\nstderr: %s", err, stderr.String())
	}
	last := out[len(out)-1]
	m := regexp.MustCompile(`^demo: written=(\d+) delivered=(\d+) `).FindStringSubmatch(last)
	if m == nil || m[2] == "0" || m[1] != m[2] {
		t.Errorf("last line %q: want the summary with delivered = written > 0", last)
	}
	if dir == "" || pid == 0 {
		t.Fatalf("the demo did not say where its cluster is:\n%s", strings.Join(out, "\n"))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir %s left behind", dir)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postmaster %d left running", pid)
	}
	return out
}
