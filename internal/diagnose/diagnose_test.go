package diagnose

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// tcpURL is a postgres:// URL for user and database through a TCP proxy in front of the test
// cluster (which listens on its Unix socket only), so that pgx takes the TCP path with its TLS
// attempt first, as against a server on the network. query is added as is.
func tcpURL(t *testing.T, user, db, query string) string {
	t.Helper()
	proxy, err := relaytest.NewProxyFor(pgtest.Shared(t).DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u := fmt.Sprintf("postgres://%s@%s/%s", user, proxy.Addr(), db)
	if query != "" {
		u += "?" + query
	}
	return u
}

// connect connects as a user would and returns the error, failing the test when it connects.
func connect(t *testing.T, dsn string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		conn.Close(ctx)
		t.Fatalf("%s connects", dsn)
	}
	return err
}

// mustConnect is the positive control of a case: the same path with the fault removed.
func mustConnect(t *testing.T, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("positive control %s: %v", dsn, err)
	}
	conn.Close(ctx)
}

func admin(t *testing.T, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.Shared(t).DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Each configuration error a real server gives is told apart, with its fix, and the diagnosis
// never leads with pgx's fallback TLS attempt although pgx's own message does.
func TestDiagnoseWithRealServers(t *testing.T) {
	db := strings.TrimPrefix(pgtest.NewDB(t), "postgres://postgres@/")
	db, _, _ = strings.Cut(db, "?")
	admin(t, `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'diag_noconnect') THEN
		CREATE ROLE diag_noconnect LOGIN; END IF; END $$`)
	admin(t, `REVOKE CONNECT ON DATABASE `+pgx.Identifier{db}.Sanitize()+` FROM PUBLIC`)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	closed.Close() // nothing listens there now

	tests := []struct {
		name     string
		dsn      string
		control  string // the same path, fault removed: it connects
		kind     Kind
		config   bool
		want     []string // in the diagnosis
		pgxNoise bool     // pgx's own message leads with the refused TLS attempt
	}{
		{name: "refused", dsn: "postgres://postgres@" + refusedAddr + "/" + db + "?connect_timeout=5",
			kind: Refused, want: []string{refusedAddr, "nothing listens there", "check the host and port"}},
		{name: "TLS the server does not offer", dsn: tcpURL(t, "postgres", db, "sslmode=require"),
			control: tcpURL(t, "postgres", db, "sslmode=disable"),
			kind:    NoTLS, config: true, want: []string{"requires TLS", "offers none", "sslmode=prefer"}},
		{name: "missing database", dsn: tcpURL(t, "postgres", "no_such_db", ""), control: tcpURL(t, "postgres", db, ""),
			kind: NoDatabase, config: true, pgxNoise: true,
			want: []string{`database "no_such_db" does not exist`, "SQLSTATE 3D000", "CREATE DATABASE no_such_db"}},
		{name: "missing role", dsn: tcpURL(t, "no_such_role", db, ""), control: tcpURL(t, "postgres", db, ""),
			kind: Authorization, config: true, pgxNoise: true,
			want: []string{`role "no_such_role" does not exist`, "SQLSTATE 28000", "CREATE ROLE no_such_role LOGIN", "pg_hba.conf"}},
		{name: "no CONNECT privilege", dsn: tcpURL(t, "diag_noconnect", db, ""), control: tcpURL(t, "diag_noconnect", "postgres", ""),
			kind: Permission, config: true, pgxNoise: true,
			want: []string{"permission denied for database", "SQLSTATE 42501", "GRANT CONNECT ON DATABASE", "TO diag_noconnect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.control != "" {
				mustConnect(t, tt.control)
			}
			err := connect(t, tt.dsn)
			wrapped := fmt.Errorf("resolve the schema: connect: %w", err)
			p, ok := Connect(wrapped)
			if !ok {
				t.Fatalf("not diagnosed: %v", err)
			}
			t.Log(p)
			if p.Kind != tt.kind || p.Config() != tt.config {
				t.Errorf("kind %d config %v, want %d %v: %v", p.Kind, p.Config(), tt.kind, tt.config, p)
			}
			for _, w := range tt.want {
				if !strings.Contains(p.Error(), w) {
					t.Errorf("diagnosis lacks %q:\n%s", w, p)
				}
			}
			if strings.Contains(p.Error(), refusedTLS) || strings.Contains(p.Error(), "failed to connect") {
				t.Errorf("diagnosis repeats pgx's noise:\n%s", p)
			}
			// pgx's own message had the noise: the check above is not vacuous.
			if tt.pgxNoise && !strings.Contains(err.Error(), refusedTLS) {
				t.Errorf("pgx's message has no refused TLS attempt, so this case proves nothing about picking the cause:\n%v", err)
			}
			var pgErr *pgconn.PgError
			if tt.kind >= NoDatabase && !errors.As(p, &pgErr) {
				t.Errorf("the diagnosis hides the server's error from errors.As: %v", p)
			}
		})
	}
}

// A wrong password (the server asks for one: a scram-sha-256 line in pg_hba.conf) is told from a
// missing role.
func TestDiagnoseAWrongPassword(t *testing.T) {
	c := pgtest.Shared(t)
	admin(t, `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'diag_pw') THEN
		CREATE ROLE diag_pw LOGIN PASSWORD 'right'; END IF; END $$`)
	hba := filepath.Join(c.Dir, "data", "pg_hba.conf")
	orig, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("local all diag_pw scram-sha-256\n"), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(hba, orig, 0o600); admin(t, "SELECT pg_reload_conf()") })
	admin(t, "SELECT pg_reload_conf()")
	right, wrong := tcpURL(t, "diag_pw:right", "postgres", ""), tcpURL(t, "diag_pw:wrong", "postgres", "")
	deadline := time.Now().Add(30 * time.Second)
	var err2 error
	for {
		mustConnect(t, right)
		if err2 = connect(t, wrong); strings.Contains(err2.Error(), "28P01") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not ask diag_pw for a password after the reload: %v", err2)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, ok := Connect(err2)
	if !ok || p.Kind != Password || !p.Config() || !strings.Contains(p.Error(), `role "diag_pw"`) || strings.Contains(p.Error(), "wrong") {
		t.Fatalf("diagnosis %v (%v): want a wrong password of role diag_pw, without the password", p, ok)
	}
}

// A host name that does not resolve is a configuration error naming the host.
func TestDiagnoseAnUnknownHost(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://relay@db.example.invalid:5432/app")
	if err != nil {
		t.Fatal(err)
	}
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true} // what the resolver answers
	}
	_, err = pgconn.ConnectConfig(context.Background(), cfg)
	p, ok := Connect(err)
	if !ok || p.Kind != UnknownHost || !p.Config() || !strings.Contains(p.Error(), `"db.example.invalid"`) {
		t.Fatalf("diagnosis %v (%v) of %v", p, ok, err)
	}
}

// An error that is not a failed connection is left alone, and one diagnosed already is kept.
func TestConnectLeavesOtherErrorsAlone(t *testing.T) {
	for _, err := range []error{nil, errors.New("x"), &pgconn.PgError{Code: "42501", Message: "permission denied for table outbox_events"}} {
		if p, ok := Connect(err); ok {
			t.Errorf("Connect(%v) = %v", err, p)
		}
	}
	p := &Problem{Kind: NoDatabase, Addr: "db:5432", Cause: "c", Fix: "f"}
	if got, ok := Connect(fmt.Errorf("wrapped: %w", p)); !ok || got != p {
		t.Errorf("a diagnosis is not kept: %v", got)
	}
}

// A refused connection is an outage for a while (a restarting server refuses too), then, if it
// persists, a configuration error; anything else in between starts the count again.
func TestWatchCountsARefusedConnectionOnceItPersists(t *testing.T) {
	now := time.Unix(1700000000, 0)
	w := Watch{now: func() time.Time { return now }}
	refused := &Problem{Kind: Refused}
	if w.Config(refused) {
		t.Fatal("a first refused connection is a configuration error")
	}
	now = now.Add(RefusedFor - time.Second)
	if w.Config(refused) {
		t.Fatal("refused for less than RefusedFor is a configuration error")
	}
	now = now.Add(time.Second)
	if !w.Config(refused) {
		t.Fatal("refused for RefusedFor is not a configuration error")
	}
	if w.Config(errors.New("timeout")) || w.Config(refused) {
		t.Fatal("another error did not start the count again")
	}
	if !w.Config(&Problem{Kind: NoDatabase}) {
		t.Fatal("a missing database is not a configuration error at once")
	}
}
