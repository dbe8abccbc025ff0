package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// startCLI starts outbox-relay in a child process and returns it with its stderr, read line by
// line into lines (closed at EOF; lines beyond its buffer are only in the process's stderr).
func startCLI(t *testing.T, env []string, args ...string) (*cliProc, <-chan string) {
	t.Helper()
	cmd := cliCommand(t, env, args...)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	p := &cliProc{cmd: cmd, read: make(chan struct{})}
	go func() {
		defer close(p.read)
		defer close(lines)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			p.stderr.WriteString(sc.Text() + "\n")
			select {
			case lines <- sc.Text():
			default: // nobody waits for lines this late; p.stderr keeps them all
			}
		}
		_, _ = io.Copy(io.Discard, errPipe)
	}()
	return p, lines
}

type cliProc struct {
	cmd    *exec.Cmd
	read   chan struct{}
	stderr strings.Builder // written until read is closed
}

// stop sends sig and waits for the process and its stderr, returning the exit code.
func (p *cliProc) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-p.read
	_ = p.cmd.Wait()
	return p.cmd.ProcessState.ExitCode()
}

// waitLine waits for a stderr line containing want, failing the test after a minute.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stderr ended without a line containing %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no stderr line containing %q within a minute", want)
		}
	}
}

// A stop requested while `run` waits for an unreachable database is a clean stop: exit 0, as
// for a stop while streaming.
func TestRunInterruptedWhileWaitingForTheDatabaseExitsZero(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dsn, conns := fakeDB(t)
			p, lines := startCLI(t, []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"},
				"run", "--metrics-addr", "", "--log-format", "json")
			waitLine(t, lines, "database not ready; retrying")
			if conns.Load() == 0 {
				t.Fatal("run waits for the database without having tried it")
			}
			if code := p.stop(t, sig); code != 0 {
				t.Errorf("%s while waiting for the database: exit %d, want 0; stderr:\n%s", sig, code, p.stderr.String())
			}
			if strings.Contains(p.stderr.String(), "context canceled") {
				t.Errorf("a requested stop is reported as an error:\n%s", p.stderr.String())
			}
		})
	}
}

// Missing configuration is a command-line error: exit 2, one line naming what to set.
func TestMissingConfigurationExitsTwo(t *testing.T) {
	dsn, conns := fakeDB(t)
	const url = "https://consumer.example/webhooks"
	tests := []struct {
		name string
		env  []string
		args []string
		fix  string
	}{
		{"run without a database", []string{"WEBHOOK_URL=" + url, "WEBHOOK_SECRET=s"}, []string{"run"}, "DB_DSN"},
		{"run without a webhook URL", []string{"DB_DSN=" + dsn, "WEBHOOK_SECRET=s"}, []string{"run"}, "--webhook-url"},
		{"run with a malformed webhook URL", []string{"DB_DSN=" + dsn, "WEBHOOK_SECRET=s", "WEBHOOK_URL=consumer:8080/hook"}, []string{"run"}, "--webhook-url"},
		{"run without a secret", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + url}, []string{"run"}, "--webhook-secret"},
		{"migrate without a database", nil, []string{"migrate"}, "--dsn"},
		{"status without a database", nil, []string{"status"}, "--dsn"},
		{"replay without a database", nil, []string{"replay", "--all"}, "--dsn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := execCLI(t, tt.env, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tt.fix) {
				t.Errorf("stderr does not name %s:\n%s", tt.fix, stderr)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("connected to the database %d times", n)
	}
}

// A mistyped subcommand is a usage error that suggests the command meant.
func TestMistypedSubcommandGetsASuggestion(t *testing.T) {
	_, stderr, code := execCLI(t, nil, "statsu")
	if code != exitUsage || !strings.Contains(stderr, "Did you mean status?") {
		t.Errorf("statsu: exit %d, stderr:\n%s\nwant exit %d and a suggestion of status", code, stderr, exitUsage)
	}
	// Positive control for "no suggestion": nothing close is not guessed at.
	_, stderr, code = execCLI(t, nil, "frobnicate")
	if code != exitUsage || strings.Contains(stderr, "Did you mean") {
		t.Errorf("frobnicate: exit %d, stderr:\n%s", code, stderr)
	}
}

// Nothing parked is nothing to do, not a failure: exit 0 with a plain statement. A named
// aggregate that is not parked stays an error.
func TestReplayWithNothingToReplay(t *testing.T) {
	dsn, _ := relaytest.MigratedDB(t)
	for _, args := range [][]string{{"--all", "--dry-run"}, {"--aggregate", "order/42", "--dry-run"}, {"--all"}} {
		stdout, stderr, code := cli(t, append([]string{"replay", "--dsn", dsn}, args...)...)
		if code != 0 || !strings.Contains(stdout, "nothing to replay") {
			t.Errorf("replay %v: exit %d, stdout %q, stderr %q; want exit 0 and 'nothing to replay'", args, code, stdout, stderr)
		}
	}
	stdout, _, code := cli(t, "replay", "--dsn", dsn, "--all", "--dry-run", "--json")
	if code != 0 || !strings.Contains(stdout, `"aggregates": []`) {
		t.Errorf("replay --all --dry-run --json: exit %d, stdout %s", code, stdout)
	}
	if _, stderr, code := cli(t, "replay", "--dsn", dsn, "--aggregate", "order/42"); code != 1 || !strings.Contains(stderr, "nothing to replay") {
		t.Errorf("replay --aggregate order/42 (not parked): exit %d, stderr %q; want 1", code, stderr)
	}
}

// A refused password is one line that names the fix, without pgx's per-address and TLS
// fallback detail. The server is the test cluster, made to ask one role for a password.
func TestWrongPasswordNamesTheFix(t *testing.T) {
	c := pgtest.Shared(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const role = "pw_check_role"
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN CREATE ROLE %s LOGIN PASSWORD 'right'; END IF;
		END $$`, role, role)); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(c.Dir, "data", "pg_hba.conf")
	orig, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	// The test cluster listens on its Unix socket only; the role's connections reach it there
	// (through the TCP proxy below), so the rule is a local one.
	line := fmt.Sprintf("local all %s scram-sha-256\n", role)
	if err := os.WriteFile(hba, append([]byte(line), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	reload := func() {
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = os.WriteFile(hba, orig, 0o600)
		_, _ = conn.Exec(context.Background(), "SELECT pg_reload_conf()")
	})
	reload()
	// No sslmode, over TCP: pgx tries TLS first and falls back, which is where the noise came
	// from. A TCP proxy in front of the socket gives the test that path.
	proxy, err := relaytest.NewProxyFor(c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	base := fmt.Sprintf("postgres://%s:%%s@%s/postgres", role, proxy.Addr())
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Positive control, and a wait for the reload: the right password connects and the
		// wrong one is refused by the server (SQLSTATE 28P01).
		good, err := pgx.Connect(ctx, fmt.Sprintf(base, "right"))
		if err != nil {
			t.Fatalf("right password: %v", err)
		}
		good.Close(ctx)
		_, err = pgx.Connect(ctx, fmt.Sprintf(base, "wrong"))
		if err != nil && strings.Contains(err.Error(), "28P01") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not ask %s for a password after reloading pg_hba.conf: %v", role, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, args := range [][]string{{"migrate"}, {"status"}, {"run", "--metrics-addr", "", "--exit-on-config-error"}} {
		env := []string{"DB_DSN=" + fmt.Sprintf(base, "wrong"), "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"}
		_, stderr, code := execCLI(t, env, args...)
		// run logs JSON lines before it fails; the error is the last line.
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		last := lines[len(lines)-1]
		t.Logf("%v: %s", args, last)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		for _, want := range []string{"password", "DB_DSN", "--dsn", role, "28P01"} {
			if !strings.Contains(last, want) {
				t.Errorf("%v: error line lacks %q:\n%s", args, want, last)
			}
		}
		for _, noise := range []string{"failed to connect", "fallback", "wrong"} {
			if strings.Contains(last, noise) {
				t.Errorf("%v: error line has %q:\n%s", args, noise, last)
			}
		}
	}
}

// migrate and status warn when the server cannot decode logically; the shared cluster (logical)
// is the positive control.
func TestMigrateAndStatusWarnWithoutLogicalWAL(t *testing.T) {
	ctx := context.Background()
	logical := pgtest.NewDB(t)
	_, stderr, code := cli(t, "migrate", "--dsn", logical)
	if code != 0 || strings.Contains(stderr, "wal_level") {
		t.Fatalf("migrate on a logical cluster: exit %d, stderr %q", code, stderr)
	}
	out, _, _ := cli(t, "status", "--dsn", logical)
	if strings.Contains(out, "wal_level") {
		t.Fatalf("status on a logical cluster warns:\n%s", out)
	}

	c, err := pgtest.Start(ctx, pgtest.Options{Settings: map[string]string{"wal_level": "replica"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name, err := c.CreateDatabase(ctx, "wal")
	if err != nil {
		t.Fatal(err)
	}
	dsn := c.DSN(name)
	_, stderr, code = cli(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.Contains(stderr, "warning: wal_level is replica") || !strings.Contains(stderr, "wal_level = logical") {
		t.Errorf("migrate on wal_level=replica: exit %d, stderr %q; want exit 0 and a warning naming the fix", code, stderr)
	}
	out, _, _ = cli(t, "status", "--dsn", dsn)
	if !regexp.MustCompile(`(?m)^warning\s+wal_level is replica`).MatchString(out) {
		t.Errorf("status on wal_level=replica does not warn:\n%s", out)
	}
	doc, _, _ := statusJSONOf(t, "--dsn", dsn)
	if !slices.ContainsFunc(doc.Warnings, func(w string) bool { return strings.Contains(w, "wal_level") }) {
		t.Errorf("status --json warnings %q lack wal_level", doc.Warnings)
	}
}

// runConfigOf parses args as `run` flags and returns the configuration, as the command would.
func runConfigOf(t *testing.T, args ...string) ([]string, error) {
	t.Helper()
	cmd := newRunCmd()
	cmd.SetArgs(args)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := runConfig(cmd.Flags())
	return cfg.Secrets, err
}

// A secret file with one secret per line means rotation, as commas do; blanks around a secret
// are dropped, and the relay says so without showing it.
func TestSecretFileLinesMeanRotation(t *testing.T) {
	t.Setenv(dsnFlag.env, "postgres://relay@127.0.0.1:1/app")
	t.Setenv(urlFlag.env, "https://consumer.example/hook")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		content string
		want    []string
	}{
		{"new-secret\n", []string{"new-secret"}},
		{"new-secret\nold-secret\n", []string{"new-secret", "old-secret"}},
		{"new-secret\r\nold-secret\r\n", []string{"new-secret", "old-secret"}},
		{"new-secret,old-secret\n", []string{"new-secret", "old-secret"}},
		{"\nnew-secret\n\n old-secret \n", []string{"new-secret", "old-secret"}},
	}
	for i, tt := range tests {
		got, err := runConfigOf(t, "--webhook-secret-file", file(fmt.Sprint(i), tt.content))
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("file %q: secrets %q (%v), want %q", tt.content, got, err, tt.want)
		}
	}

	// The warning: from the real binary, and without the value.
	dsn, _ := fakeDB(t)
	env := []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook",
		"WEBHOOK_SECRET_FILE=" + file("blank", "new-secret \nold-secret\n")}
	p, lines := startCLI(t, env, "run", "--metrics-addr", "", "--log-format", "json")
	waitLine(t, lines, "database not ready")
	p.stop(t, syscall.SIGTERM)
	log := p.stderr.String()
	if !strings.Contains(log, "trimmed") || !strings.Contains(log, `"trimmed":1`) {
		t.Errorf("no warning that a secret was trimmed:\n%s", log)
	}
	if strings.Contains(log, "new-secret") || strings.Contains(log, "old-secret") {
		t.Errorf("the log shows a secret:\n%s", log)
	}
	// Positive control: a clean file gives no warning.
	env[2] = "WEBHOOK_SECRET_FILE=" + file("clean", "new-secret\nold-secret\n")
	p, lines = startCLI(t, env, "run", "--metrics-addr", "", "--log-format", "json")
	waitLine(t, lines, "database not ready")
	p.stop(t, syscall.SIGTERM)
	if strings.Contains(p.stderr.String(), "trimmed") {
		t.Errorf("a clean secret file is reported as trimmed:\n%s", p.stderr.String())
	}
}

// Duration fields are logged in seconds, as docs/reference/metrics.md, Logs says: the first wait for
// an unreachable database is 200ms, logged as retry_in 0.2.
func TestLoggedDurationsAreSeconds(t *testing.T) {
	dsn, _ := fakeDB(t)
	p, lines := startCLI(t, []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"},
		"run", "--metrics-addr", "", "--log-format", "json")
	defer p.stop(t, syscall.SIGTERM)
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("run ended without waiting for the database")
			}
			var rec struct {
				Message string   `json:"message"`
				RetryIn *float64 `json:"retry_in"`
			}
			if json.Unmarshal([]byte(l), &rec) != nil || rec.Message != "database not ready; retrying" {
				continue
			}
			if rec.RetryIn == nil || *rec.RetryIn != 0.2 {
				t.Fatalf("first retry_in logged as %s, want 0.2 (seconds)", l)
			}
			return
		case <-timeout:
			t.Fatal("no 'database not ready' line within a minute")
		}
	}
}
