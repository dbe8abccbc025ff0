package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// concurrency is the relay's --max-in-flight (its default) and the ceiling clients' number of
// workers, so that both keep the same number of requests in flight.
const concurrency = 64

// relayPackage is built into the binary the bench runs, as `make build` builds it but for the
// stripped symbols and version stamp, which do not change how it runs.
const relayPackage = "github.com/outbox-relay/outbox-relay/cmd/outbox-relay"

// buildRelay compiles the relay into dir and returns the binary's path. If BENCH_RELAY names
// a binary, that one is used instead (to measure a given build).
func buildRelay(ctx context.Context, dir string) (string, error) {
	if bin := os.Getenv("BENCH_RELAY"); bin != "" {
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command on PATH to build the relay: install Go, or set BENCH_RELAY to a relay binary")
	}
	out := filepath.Join(dir, "outbox-relay")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, relayPackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w (run the bench from inside the repository, as `make bench` does, "+
			"or set BENCH_RELAY to a relay binary)\n%s", relayPackage, err, b)
	}
	return out, nil
}

// relayRevision describes the source the relay was built from: the commit from the binary's
// build information, or else (builds made with -buildvcs=false) from git, read-only; then
// "+ uncommitted changes" if the tree differed. BENCH_RELAY binaries without build
// information are "unknown".
func relayRevision(ctx context.Context, bin string) string {
	rev, modified := "", false
	if info, err := buildinfo.ReadFile(bin); err == nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if rev == "" && os.Getenv("BENCH_RELAY") == "" {
		rev, modified = gitRevision(ctx)
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += " + uncommitted changes"
	}
	return rev
}

// gitRevision returns HEAD and whether tracked files differ from it, or "" outside a checkout.
// GIT_OPTIONAL_LOCKS=0 keeps `git status` from writing the index.
func gitRevision(ctx context.Context) (string, bool) {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	cmd := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no")
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	status, err := cmd.Output()
	return strings.TrimSpace(string(head)), err == nil && len(bytes.TrimSpace(status)) > 0
}

// relayTarget is where a relay run reads from and delivers to.
type relayTarget struct {
	DSN, Slot, Publication, URL, Secret string
	// DestArgs, if set, select the destination instead of URL and Secret (a broker's flags).
	DestArgs []string
	// Args are extra flags (batching, marks).
	Args []string
	// Config, if set, is a --config file naming the pipelines; Slot, Publication, URL and
	// Secret are then unused.
	Config string
}

// relayProc is one running `outbox-relay run`.
type relayProc struct {
	*child
	metricsAddr string
	started     time.Time
}

// startRelay starts the relay with its default settings (--max-in-flight given explicitly) and
// waits until /readyz says it is streaming from the slot.
func startRelay(ctx context.Context, bin string, t relayTarget) (*relayProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dest := []string{"--webhook-url", t.URL, "--webhook-secret", t.Secret}
	if t.DestArgs != nil {
		dest = t.DestArgs
	}
	cmd := exec.Command(bin, append(append([]string{"run", "--dsn", t.DSN}, dest...),
		"--slot", t.Slot, "--publication", t.Publication, "--metrics-addr", addr,
		"--max-in-flight", strconv.Itoa(concurrency),
		"--log-level", "warn", "--log-format", "json")...)
	cmd.Args = append(cmd.Args, t.Args...)
	if t.Config != "" {
		cmd = exec.Command(bin, "run", "--config", t.Config, "--dsn", t.DSN, "--metrics-addr", addr,
			"--log-level", "warn", "--log-format", "json")
	}
	started := time.Now()
	c, err := startChild("relay", cmd)
	if err != nil {
		return nil, err
	}
	p := &relayProc{child: c, metricsAddr: addr, started: started}
	if err := waitReady(ctx, "http://"+addr+"/readyz", c, 60*time.Second); err != nil {
		_ = c.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// usage is what a process used: CPU so far and peak RSS.
type usage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

func (p *relayProc) usage() (usage, error) {
	cpu, err := processCPU(p.pid())
	if err != nil {
		return usage{}, fmt.Errorf("relay CPU: %w", err)
	}
	rss, err := peakRSS(p.pid())
	if err != nil {
		return usage{}, fmt.Errorf("relay peak RSS: %w", err)
	}
	return usage{CPU: cpu, PeakRSS: rss}, nil
}
