package cdc

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// server is one server of the cluster a slot can live on: the primary (the relay's DSN) or a
// hot standby. A standby is named host:port in outbox_slot_location, so that a relay started
// without a replication DSN can still reach the slot it has to drain there.
type server struct {
	// name is "" for the primary, else host:port (the first host of the replication DSN).
	name string
	// dsn is the connection string: the replication DSN for the configured standby, the
	// primary's DSN otherwise.
	dsn string
	// recorded is set for a standby known only by its recorded name: it is reached with the
	// primary's connection settings (same roles and database: it is a physical copy) with the
	// host and port replaced.
	recorded bool
}

func primaryServer(dsn string) server { return server{dsn: dsn} }

// standbyServer is the server of a replication DSN, named after its first host.
func standbyServer(dsn string) (server, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return server{}, badDSN(err)
	}
	return server{name: cfg.Host + ":" + strconv.Itoa(int(cfg.Port)), dsn: dsn}, nil
}

// recordedServer is the server a location row names: the primary for "", else the standby at
// that host:port, reached with the primary's settings.
func recordedServer(primaryDSN, name string) server {
	if name == "" {
		return primaryServer(primaryDSN)
	}
	return server{name: name, dsn: primaryDSN, recorded: true}
}

// String names the server in logs and errors.
func (s server) String() string {
	if s.name == "" {
		return "the primary"
	}
	return "standby " + s.name
}

// isStandby reports whether the slot on s is decoded on a standby (so a stream there must be
// allowed onto a server in recovery).
func (s server) isStandby() bool { return s.name != "" }

// pgconnConfig returns the settings of a connection to s.
func (s server) pgconnConfig() (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(s.dsn)
	if err != nil {
		return nil, badDSN(err)
	}
	if s.recorded {
		if err := retarget(cfg, s.name); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// connect opens an SQL connection to s.
func (s server) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return nil, badDSN(err)
	}
	if s.recorded {
		if err := retarget(&cfg.Config, s.name); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s, err)
	}
	return conn, nil
}

// retarget points cfg at host:port instead of its own hosts, keeping everything else (user,
// password, database, TLS). The primary's target_session_attrs (read-write, say) would refuse a
// standby, so they are dropped.
func retarget(cfg *pgconn.Config, hostPort string) error {
	i := strings.LastIndexByte(hostPort, ':')
	port, err := strconv.ParseUint(hostPort[i+1:], 10, 16)
	if i <= 0 || err != nil {
		return fmt.Errorf("recorded server %q is not host:port: fix or delete its row in outbox_slot_location", hostPort)
	}
	host := hostPort[:i]
	oldHost, oldPort := cfg.Host, cfg.Port
	cfg.Host, cfg.Port, cfg.ValidateConnect = host, uint16(port), nil
	setServerName(cfg.TLSConfig, host)
	var keep []*pgconn.FallbackConfig
	for _, f := range cfg.Fallbacks {
		// The same first host without TLS (sslmode=prefer) stays a fallback; other hosts go.
		if f.Host == oldHost && f.Port == oldPort {
			f.Host, f.Port = host, uint16(port)
			setServerName(f.TLSConfig, host)
			keep = append(keep, f)
		}
	}
	cfg.Fallbacks = keep
	return nil
}

// setServerName makes a TLS configuration that verifies the server's name verify the new host.
func setServerName(tc *tls.Config, host string) {
	if tc != nil && tc.ServerName != "" {
		tc.ServerName = host
	}
}

// sameServer reports whether two connections reach one server (under two names, say an address
// and a host name): same postmaster start, same recovery state.
func sameServer(ctx context.Context, a, b *pgx.Conn) (bool, error) {
	const q = `SELECT pg_postmaster_start_time()::text || ' ' || pg_is_in_recovery()::text`
	var ia, ib string
	if err := a.QueryRow(ctx, q).Scan(&ia); err != nil {
		return false, fmt.Errorf("read server identity: %w", err)
	}
	if err := b.QueryRow(ctx, q).Scan(&ib); err != nil {
		return false, fmt.Errorf("read server identity: %w", err)
	}
	return ia == ib, nil
}
