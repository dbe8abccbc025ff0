package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// logLine is the part of a JSON log line these tests read.
type logLine struct {
	Level, Message, Cause, Fix, Addr string
}

func parseLog(t *testing.T, line string) (l logLine, ok bool) {
	var raw map[string]any
	if json.Unmarshal([]byte(line), &raw) != nil {
		return l, false
	}
	str := func(k string) string { s, _ := raw[k].(string); return s }
	return logLine{Level: str("level"), Message: str("message"), Cause: str("cause"), Fix: str("fix"), Addr: str("addr")}, true
}

// metricsAddrOf waits for the line that says where /readyz answers.
func metricsAddrOf(t *testing.T, lines <-chan string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("stderr ended before the metrics server listened")
			}
			if l, _ := parseLog(t, line); l.Message == "serving /metrics, /healthz, /readyz" {
				return l.Addr
			}
		case <-timeout:
			t.Fatal("the metrics server did not listen within a minute")
		}
	}
}

func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A missing database is a configuration error: run keeps retrying, and says at every attempt
// (not once a minute) the cause and the fix, which /readyz answers too; a stop is clean and says
// so once. With --exit-on-config-error it exits 1 at once with the same, on one line without
// pgx's refused TLS attempt.
func TestRunRetriesAConfigurationErrorNamingTheFix(t *testing.T) {
	proxy, err := relaytest.NewProxyFor(pgtest.Shared(t).DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	dsn := "postgres://postgres@" + proxy.Addr() + "/no_such_db" // TCP, default sslmode: pgx tries TLS first
	env := []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"}
	p, lines := startCLI(t, env, "run", "--metrics-addr", "127.0.0.1:0", "--log-format", "json")
	addr := metricsAddrOf(t, lines)
	retries := 0
	for retries < 3 { // the first attempt and two retries, 0.2 s and 0.4 s apart: no once-a-minute quiet
		line, ok := <-lines
		if !ok {
			t.Fatalf("run ended while the database is missing:\n%s", p.stderr.String())
		}
		l, _ := parseLog(t, line)
		if l.Message != "cannot connect to the database; retrying" {
			continue
		}
		retries++
		if l.Level != "error" || !strings.Contains(l.Cause, `database "no_such_db" does not exist`) ||
			!strings.Contains(l.Fix, "CREATE DATABASE no_such_db") {
			t.Fatalf("retry line without the cause and the fix: %s", line)
		}
	}
	code, body := readyz(t, addr)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `database "no_such_db" does not exist`) ||
		!strings.Contains(body, "CREATE DATABASE no_such_db") {
		t.Fatalf("/readyz = %d %q, want 503 with the cause and the fix", code, body)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM while retrying: exit %d\n%s", code, p.stderr.String())
	}
	if n := strings.Count(p.stderr.String(), "stopped during start-up"); n != 1 {
		t.Fatalf("%d lines say the relay stopped during start-up, want 1:\n%s", n, p.stderr.String())
	}

	_, stderr, code := execCLI(t, env, "run", "--metrics-addr", "", "--exit-on-config-error")
	lastLines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lastLines[len(lastLines)-1]
	if code != 1 || !strings.HasPrefix(last, "outbox-relay: cannot connect to the database at "+proxy.Addr()) ||
		!strings.Contains(last, "CREATE DATABASE no_such_db") || !strings.Contains(last, "DB_DSN or --dsn") {
		t.Fatalf("--exit-on-config-error: exit %d, last line %q; want 1 and the diagnosis", code, last)
	}
	for _, noise := range []string{"failed to connect", "refused TLS", "tls error"} {
		if strings.Contains(last, noise) {
			t.Errorf("the last line carries pgx's %q:\n%s", noise, last)
		}
	}
}

// A configuration error that appears while the relay streams (here pg_hba.conf turns its role
// away from its database) is retried with the cause and the fix on each reconnect, and /readyz
// says it; with --exit-on-config-error the relay exits 1 instead.
func TestAConfigurationErrorWhileStreaming(t *testing.T) {
	for _, exit := range []bool{false, true} {
		t.Run(fmt.Sprintf("exit-on-config-error=%v", exit), func(t *testing.T) { configErrorWhileStreaming(t, exit) })
	}
}

// hbaRejecter turns every role away from one database through the shared cluster's pg_hba.conf,
// and puts the file back; its changes go through a connection to another database.
type hbaRejecter struct {
	t     *testing.T
	path  string
	orig  []byte
	admin *pgx.Conn
}

func newHBARejecter(t *testing.T) *hbaRejecter {
	c := pgtest.Shared(t)
	h := &hbaRejecter{t: t, path: filepath.Join(c.Dir, "data", "pg_hba.conf")}
	var err error
	if h.orig, err = os.ReadFile(h.path); err != nil {
		t.Fatal(err)
	}
	if h.admin, err = pgx.Connect(context.Background(), c.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.restore(); h.admin.Close(context.Background()) })
	return h
}

func (h *hbaRejecter) exec(sql string) {
	h.t.Helper()
	if _, err := h.admin.Exec(context.Background(), sql); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

// reject turns every role away from db (a logical replication connection names it too) and
// ends the replication session of slot, whose reconnects then meet the refusal.
func (h *hbaRejecter) reject(db, slot string) {
	rule := fmt.Sprintf("local %s all reject\n", pgx.Identifier{db}.Sanitize())
	if err := os.WriteFile(h.path, append([]byte(rule), h.orig...), 0o600); err != nil {
		h.t.Fatal(err)
	}
	h.exec(`SELECT pg_reload_conf()`)
	h.exec(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '` + slot + `' AND active`)
}

func (h *hbaRejecter) restore() {
	_ = os.WriteFile(h.path, h.orig, 0o600)
	h.exec(`SELECT pg_reload_conf()`)
}

func configErrorWhileStreaming(t *testing.T, exit bool) {
	dsn, pool := migratedDB(t)
	var db string
	if err := pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	hba := newHBARejecter(t)
	slot := fmt.Sprintf("cfgerr_%v", exit)
	args := []string{"run", "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--slot", slot, "--publication", slot}
	if exit {
		args = append(args, "--exit-on-config-error")
	}
	p, lines := startCLI(t, []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"}, args...)
	t.Cleanup(func() {
		if t.Failed() {
			<-p.read
			t.Logf("relay's stderr:\n%s", p.stderr.String())
		}
	})
	addr := metricsAddrOf(t, lines)
	relaytest.WaitFor(t, time.Minute, "the relay streams", func() bool { code, _ := readyz(t, addr); return code == http.StatusOK })
	hba.reject(db, slot)
	if exit {
		<-p.read
		_ = p.cmd.Wait()
		out := p.stderr.String()
		if code := p.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out, "pg_hba.conf") || !strings.Contains(out, "(SQLSTATE 28000)") {
			t.Fatalf("exit %d, want 1 naming pg_hba.conf and SQLSTATE 28000:\n%s", code, out)
		}
		return
	}
	waitLine(t, lines, "cannot reconnect to the database; retrying")
	relaytest.WaitFor(t, time.Minute, "/readyz names the cause", func() bool {
		code, body := readyz(t, addr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "pg_hba.conf") && strings.Contains(body, "28000")
	})
	hba.restore() // fixed: the relay streams again by itself
	relaytest.WaitFor(t, time.Minute, "the relay streams again", func() bool { code, _ := readyz(t, addr); return code == http.StatusOK })
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr.String())
	}
}

// A connection string that does not parse is echoed with its password masked and nothing else
// hidden, by every command, with what to look at: here the scheme.
func TestABadDSNIsEchoedWithOnlyThePasswordMasked(t *testing.T) {
	const dsn = "postgress://relay:s3cret@db.example:5432/app"
	for _, args := range [][]string{{"status"}, {"migrate"}, {"endpoint", "list"}, {"run", "--metrics-addr", ""}} {
		env := []string{"DB_DSN=" + dsn, "WEBHOOK_URL=http://127.0.0.1:1/hook", "WEBHOOK_SECRET=s"}
		_, stderr, code := execCLI(t, env, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		last := lines[len(lines)-1]
		if code == 0 || !strings.Contains(last, "`postgress://relay:xxxxxx@db.example:5432/app`") ||
			!strings.Contains(last, `it begins with "postgress://": a URL begins with postgres:// or postgresql://`) ||
			!strings.Contains(last, "DB_DSN or --dsn") || strings.Contains(stderr, "s3cret") {
			t.Errorf("%v: exit %d, last line %q; want the DSN with only its password masked, and the scheme named", args, code, last)
		}
	}
}
