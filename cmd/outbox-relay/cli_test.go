package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cliMainEnv makes this test binary act as outbox-relay: init runs main's run on the
// arguments and exits, before any TestMain. execCLI uses it to see what a user sees: separate
// output streams, the real exit code, and an environment of the test's choosing.
const cliMainEnv = "OUTBOX_RELAY_TEST_AS_CLI"

func init() {
	if os.Getenv(cliMainEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
}

// execCLI runs outbox-relay with args in a child process. Its environment is this one's without
// the variables the CLI reads, plus env ("NAME=value").
func execCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := cliCommand(t, env, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("outbox-relay %q: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func cliCommand(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return cliCommandTimeout(t, 2*time.Minute, env, args...)
}

// cliCommandTimeout is cliCommand with a child killed after timeout instead of two minutes.
func cliCommandTimeout(t *testing.T, timeout time.Duration, env []string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, self, args...)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(cliEnvVars, name) && name != "GORACE" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A race-enabled child would otherwise sleep a second at exit.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(append(cmd.Env, cliMainEnv+"=1", "GORACE="+gorace), env...)
	return cmd
}

// cliEnvVars are the environment variables the CLI reads, by the flags that fall back on them.
var cliEnvVars = append([]string{dsnFlag.env, urlFlag.env, secretFlag.env, secretFileFlag.env, schemaFlag.env,
	apiTokensFileFlag.env, apiTokensEnv, apiKeyFileFlag.env, apiKeyEnv}, otelEnvVars...)

// subcommands returns the registered subcommands a user can run (not help).
func subcommands() []*cobra.Command {
	var out []*cobra.Command
	for _, c := range newRootCmd().Commands() {
		if c.IsAvailableCommand() {
			out = append(out, c)
		}
	}
	return out
}

func TestHelpListsEveryCommand(t *testing.T) {
	stdout, stderr, code := execCLI(t, nil, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, stderr)
	}
	var names []string
	for _, c := range subcommands() {
		names = append(names, c.Name())
		if !regexp.MustCompile(`(?m)^\s+` + c.Name() + `\s+\S`).MatchString(stdout) {
			t.Errorf("--help does not list %s with its summary:\n%s", c.Name(), stdout)
		}
	}
	// The commands the docs document; the loop above covers any added later.
	for _, want := range []string{"run", "migrate", "status", "replay", "prune", "demo", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s subcommand; registered: %v", want, names)
		}
	}
}

// envOf maps each flag that falls back on an environment variable to that variable.
var envOf = map[string]string{
	dsnFlag.name: dsnFlag.env, urlFlag.name: urlFlag.env,
	secretFlag.name: secretFlag.env, secretFileFlag.name: secretFileFlag.env,
	apiTokensFileFlag.name: apiTokensFileFlag.env, apiKeyFileFlag.name: apiKeyFileFlag.env,
}

func TestEverySubcommandHelpHasAnExampleAndNamesEnvVars(t *testing.T) {
	for _, c := range subcommands() {
		t.Run(c.Name(), func(t *testing.T) {
			stdout, _, code := execCLI(t, nil, c.Name(), "--help")
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if !strings.Contains(stdout, "\nExamples:\n  ") || !strings.Contains(stdout, "outbox-relay "+c.Name()) {
				t.Errorf("help shows no example of outbox-relay %s:\n%s", c.Name(), stdout)
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				env, ok := envOf[f.Name]
				if !ok {
					return
				}
				if !strings.Contains(f.Usage, "env "+env) {
					t.Errorf("--%s falls back on %s, but its usage does not say so: %q", f.Name, env, f.Usage)
				}
				if !strings.Contains(stdout, "env "+env) {
					t.Errorf("help lacks %s:\n%s", env, stdout)
				}
			})
		})
	}
}

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	stdout, _, code := execCLI(t, nil, "version")
	re := regexp.MustCompile(`^outbox-relay (\S+) commit (\S+) (go\S+)\n$`)
	m := re.FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("version: exit %d, output %q; want %s", code, stdout, re)
	}
	if m[3] != runtime.Version() {
		t.Errorf("Go version %s, want %s", m[3], runtime.Version())
	}

	// What the build stamps with -ldflags "-X main.version=... -X main.commit=..." is printed.
	saveV, saveC := version, commit
	defer func() { version, commit = saveV, saveC }()
	version, commit = "v1.2.3", "abc1234"
	root := newRootCmd()
	var out strings.Builder
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "outbox-relay v1.2.3 commit abc1234 " + runtime.Version() + "\n"; out.String() != want {
		t.Errorf("stamped version: %q, want %q", out.String(), want)
	}
}

// A refusal of the command line is one line: the reason and the fix (the flag to set, the
// command meant, or the --help of the command at fault), and nothing else.
func TestUsageErrorsExitTwoWithOneLineNamingTheFix(t *testing.T) {
	tests := []struct {
		name string
		args []string
		fix  string
	}{
		{"unknown subcommand", []string{"frobnicate"}, "`outbox-relay --help` lists the commands"},
		{"misspelled subcommand", []string{"statsu"}, "Did you mean status?"},
		{"unknown root flag", []string{"--frobnicate"}, "`outbox-relay --help` lists its flags"},
		{"unknown subcommand flag", []string{"run", "--frobnicate"}, "`outbox-relay run --help` lists its flags"},
		{"misspelled flag", []string{"migrate", "--dns", "postgres://x"}, "`outbox-relay migrate --help` lists its flags"},
		{"stray argument", []string{"version", "extra"}, "outbox-relay version takes no arguments"},
		{"bad flag value", []string{"demo", "--rate", "fast"}, "`outbox-relay demo --help` lists its flags"},
		{"bad demo rate", []string{"demo", "--rate", "0"}, "--rate"},
		{"no database", []string{"status"}, "set DB_DSN or pass --dsn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := execCLI(t, []string{"DB_DSN="}, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "outbox-relay: ") || !strings.Contains(lines[0], tt.fix) {
				t.Errorf("stderr is not one line naming the fix (%s):\n%s", tt.fix, stderr)
			}
			if strings.Contains(stderr, "for usage") {
				t.Errorf("stderr ends with a usage hint that names no fix:\n%s", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing (no usage dump)", stdout)
			}
		})
	}
}

// fakeDB is a TCP listener standing in for PostgreSQL, counting the connections it gets.
func fakeDB(t *testing.T) (dsn string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	return "postgres://relay@" + ln.Addr().String() + "/app?sslmode=disable&connect_timeout=2", conns
}

func TestRunRejectsBadConfigurationBeforeTheDatabase(t *testing.T) {
	dsn, conns := fakeDB(t)
	const goodURL = "https://consumer.example/webhooks"
	tests := []struct {
		name string
		env  []string
		args []string
		fix  string // what the message must name
	}{
		{"no database", []string{"WEBHOOK_URL=" + goodURL, "WEBHOOK_SECRET=s"}, nil, "DB_DSN"},
		{"no webhook URL", []string{"DB_DSN=" + dsn, "WEBHOOK_SECRET=s"}, nil, "WEBHOOK_URL"},
		{"URL without scheme", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=consumer:8080/webhook", "WEBHOOK_SECRET=s"}, nil, "http:// or https://"},
		{"URL not http", []string{"DB_DSN=" + dsn, "WEBHOOK_SECRET=s"}, []string{"--webhook-url", "ftp://consumer/hook"}, "http:// or https://"},
		{"no secret", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + goodURL}, nil, "WEBHOOK_SECRET"},
		{"unreadable secret file", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + goodURL, "WEBHOOK_SECRET_FILE=/nonexistent/secret"}, nil, "secret file"},
		{"webhook and NATS", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + goodURL, "NATS_URL=nats://127.0.0.1:4222"}, nil, "exactly one destination"},
		{"NATS flag without URL", []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + goodURL, "WEBHOOK_SECRET=s"}, []string{"--nats-subject", "a.b"}, "--nats-url"},
		{"bad NATS subject", []string{"DB_DSN=" + dsn}, []string{"--nats-url", "nats://127.0.0.1:4222", "--nats-subject", "a..b"}, "placeholders are"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := execCLI(t, tt.env, append([]string{"run", "--metrics-addr", ""}, tt.args...)...)
			if code == 0 {
				t.Fatal("exit 0")
			}
			if !strings.Contains(stderr, tt.fix) {
				t.Errorf("stderr does not name the fix (%s):\n%s", tt.fix, stderr)
			}
		})
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("run connected to the database %d times before rejecting its configuration", n)
	}
}

func TestHelpNeverShowsSecrets(t *testing.T) {
	const secret, password = "s3cr3t-webhook-value", "pa55w0rd-in-dsn"
	env := []string{"WEBHOOK_SECRET=" + secret, "DB_DSN=postgres://app:" + password + "@db/app",
		"WEBHOOK_URL=https://consumer.example/hook"}
	runs := [][]string{{"--help"}, {"help"}}
	for _, c := range subcommands() {
		runs = append(runs, []string{c.Name(), "--help"}, []string{"help", c.Name()})
	}
	for _, args := range runs {
		stdout, stderr, code := execCLI(t, env, args...)
		if code != 0 {
			t.Errorf("%q: exit %d", args, code)
		}
		for _, s := range []string{secret, password} {
			if strings.Contains(stdout+stderr, s) {
				t.Errorf("%q shows a secret from the environment:\n%s%s", args, stdout, stderr)
			}
		}
	}
}
