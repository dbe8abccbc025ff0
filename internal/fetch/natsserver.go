package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// natsServerModule is the directory, relative to the source root, of the Go module whose go.mod
// requires github.com/nats-io/nats-server/v2: the tests module, for its in-process test servers
// (the library's module requires no server). The build runs there, so it builds the version
// that module pins.
const natsServerModule = "tests"

// natsServerPackage is the main package of nats-server.
const natsServerPackage = "github.com/nats-io/nats-server/v2"

// NATSServer returns a nats-server binary built from the version of the module natsServerModule
// requires, cached as nats-server/<version>/nats-server under CacheDir. When it built one, one
// line saying what and where goes to Log.
func NATSServer(ctx context.Context) (string, error) {
	root, err := SourceRoot()
	if err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	modDir := filepath.Join(root, natsServerModule)
	if _, err := exec.LookPath("go"); err != nil {
		return "", errors.New("build nats-server: needs go on PATH")
	}
	version, err := goCommand(ctx, modDir, "list", "-m", "-f", "{{.Version}}", natsServerPackage)
	if err != nil {
		return "", fmt.Errorf("build nats-server: which version %s requires: %w", modDir, err)
	}
	cache := filepath.Join(CacheDir(), "nats-server")
	bin := filepath.Join(cache, version, "nats-server")
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(cache, ".lock"))
	if err != nil {
		return "", fmt.Errorf("build nats-server: %w", err)
	}
	defer unlock()
	if isExecutable(bin) { // built by whoever held the lock before us
		return bin, nil
	}
	start := time.Now()
	if err := buildNATSServer(ctx, modDir, cache, bin); err != nil {
		return "", fmt.Errorf("build nats-server %s: %w", version, err)
	}
	fmt.Fprintf(Log, "fetch: built nats-server %s (go build %s in %s) into %s in %s\n",
		version, natsServerPackage, modDir, bin, time.Since(start).Round(time.Second))
	return bin, nil
}

// buildNATSServer builds nats-server in modDir into a temporary directory under cache, then
// renames it to bin: a half-written binary is never at bin. The caller holds the lock.
func buildNATSServer(ctx context.Context, modDir, cache, bin string) error {
	// Left by a build that was killed: no one else builds while we hold the lock.
	old, _ := filepath.Glob(filepath.Join(cache, ".tmp-*"))
	for _, d := range old {
		_ = os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(cache, ".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "nats-server")
	if _, err := goCommand(ctx, modDir, "build", "-o", out, natsServerPackage); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	return os.Rename(out, bin)
}

// goCommand runs the go command in dir and returns its trimmed standard output. cgo is off: the
// server needs none, and a machine with Go may have no C compiler.
func goCommand(ctx context.Context, dir string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err() // stopped, not broken
		}
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
