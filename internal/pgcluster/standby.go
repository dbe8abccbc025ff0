package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyOptions tune StartStandby.
type StandbyOptions struct {
	// Slot is the primary's physical replication slot the standby streams through; it is
	// created if missing. Empty: "standby".
	Slot string
	// DB is the database named in primary_conninfo (slot synchronisation needs one). Empty:
	// "postgres".
	DB string
	// Settings are extra server settings of the standby, e.g. sync_replication_slots=on.
	Settings map[string]string
}

// StartStandby makes a hot physical standby of c and starts it: a copy of c's data directory
// taken between pg_backup_start and pg_backup_stop (no pg_basebackup needed, so it works for
// any version whose server binaries are at hand), streaming from c through a physical slot,
// with hot_standby_feedback on. Close it like any cluster.
func (c *Cluster) StartStandby(ctx context.Context, opts StandbyOptions) (*Cluster, error) {
	if opts.Slot == "" {
		opts.Slot = "standby"
	}
	if opts.DB == "" {
		opts.DB = "postgres"
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return nil, fmt.Errorf("pgcluster: connect to primary: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true)
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, opts.Slot); err != nil {
		return nil, fmt.Errorf("pgcluster: create physical slot: %w", err)
	}
	dir, err := os.MkdirTemp("", "outbox-relay-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	s := &Cluster{BinDir: c.BinDir, Dir: dir, Port: DefaultPort, cred: c.cred}
	fail := func(err error) (*Cluster, error) {
		_ = s.Close()
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_backup_start('pgcluster standby', true)"); err != nil {
		return fail(fmt.Errorf("pgcluster: pg_backup_start: %w", err))
	}
	if err := copyDataDir(c.dataDir(), s.dataDir()); err != nil {
		_, _ = conn.Exec(ctx, "SELECT pg_backup_stop(false)")
		return fail(err)
	}
	var label string
	if err := conn.QueryRow(ctx, "SELECT labelfile FROM pg_backup_stop(false)").Scan(&label); err != nil {
		return fail(fmt.Errorf("pgcluster: pg_backup_stop: %w", err))
	}
	files := map[string]string{"backup_label": label, "standby.signal": ""}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(s.dataDir(), name), []byte(content), 0o600); err != nil {
			return fail(fmt.Errorf("pgcluster: %w", err))
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sock"), 0o700); err != nil {
		return fail(fmt.Errorf("pgcluster: %w", err))
	}
	if s.cred != nil {
		if err := chownTree(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fail(err)
		}
	}
	settings := map[string]string{
		"primary_conninfo": fmt.Sprintf("host=%s port=%d user=postgres dbname=%s application_name=%s",
			c.SocketDir(), c.Port, opts.DB, opts.Slot),
		"primary_slot_name":    opts.Slot,
		"hot_standby":          "on",
		"hot_standby_feedback": "on",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	s.opts = Options{Settings: settings, Durable: c.opts.Durable}
	if err := s.Start(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

// copyDataDir copies a running cluster's data directory for a backup, leaving out what
// pg_basebackup leaves out: the pid file, WAL segments and the primary's replication slots.
func copyDataDir(from, to string) error {
	if err := os.Mkdir(to, 0o700); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	tar := fmt.Sprintf("tar -C %q --exclude=./postmaster.pid --exclude=./postmaster.opts --exclude='./pg_wal/0*' "+
		"--exclude='./pg_replslot/*' --exclude='./pg_stat_tmp/*' -cf - . | tar -C %q -xf -", from, to)
	if out, err := exec.Command("sh", "-c", tar).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: copy data directory: %w\n%s", err, out)
	}
	return nil
}

// Promote ends recovery on a standby and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to standby: %w", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil || !ok {
		return fmt.Errorf("pgcluster: promote: ok=%v: %v\n%s", ok, err, c.LogTail(20))
	}
	return nil
}

// SigKill kills the postmaster and every server process with SIGKILL, as a crashed machine
// would: no shutdown of any kind, connections just vanish.
func (c *Cluster) SigKill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return nil
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("pgcluster: postmaster %s did not exit after SIGKILL", strconv.Itoa(c.cmd.Process.Pid))
	}
	c.cmd = nil
	return nil
}
