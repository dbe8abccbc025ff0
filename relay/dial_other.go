//go:build !linux

package relay

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; keepalives and the
// replication timeout still find a dead connection.
func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
