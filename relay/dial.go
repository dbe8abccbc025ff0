package relay

import (
	"context"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Keepalive settings of every connection the relay opens to PostgreSQL: an idle connection
// whose peer is gone is found after keepaliveIdle + keepaliveCount × keepaliveInterval (30s),
// instead of after Linux's default two hours.
const (
	keepaliveIdle     = 15 * time.Second
	keepaliveInterval = 5 * time.Second
	keepaliveCount    = 3
)

// dialer returns the DialFunc of every connection the relay opens to PostgreSQL (replication
// and pool): TCP keepalives as above and, where the platform has it, TCP_USER_TIMEOUT, so that
// a write the peer never acknowledges fails after userTimeout instead of after some 15 minutes
// of retransmissions. A connect that gets no answer gives up after userTimeout too.
func dialer(userTimeout time.Duration) pgconn.DialFunc {
	d := &net.Dialer{
		Timeout:         userTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount},
		Control: func(network, _ string, c syscall.RawConn) error {
			if network != "tcp" && network != "tcp4" && network != "tcp6" {
				return nil // a Unix socket has no TCP options
			}
			return setUserTimeout(c, userTimeout)
		},
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
}
