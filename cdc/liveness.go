package cdc

import (
	"errors"
	"time"
)

// ErrReplicationTimeout means nothing arrived from the server for the replication timeout,
// probes included: the connection is dead (a partition, a frozen middlebox, a hung server) and
// the stream closes it and reconnects.
var ErrReplicationTimeout = errors.New("replication timeout: nothing received from the server")

// DefaultReplicationTimeout is the replication timeout when neither Config nor the server's
// wal_sender_timeout sets one.
const DefaultReplicationTimeout = 60 * time.Second

// probesPerTimeout is how many probes a silent connection gets within the timeout. A live
// walsender answers a reply-requested status update at once when it is idle, but while it
// decodes a large transaction it reads replies only every wal_sender_timeout/2 or so; probing
// every quarter keeps one waiting for it then.
const probesPerTimeout = 4

// silence measures how long the read loop has waited for the server without hearing from it.
// Time spent not reading (handing a transaction over, paused on a full buffer) does not count:
// the server may have spoken meanwhile, and the bytes wait in the socket.
type silence struct {
	timeout time.Duration
	since   time.Time // the wait began: the last message, or the return to reading
	probed  time.Time // the last probe of this wait; zero if none yet
}

// heard restarts the wait at now.
func (s *silence) heard(now time.Time) { s.since, s.probed = now, time.Time{} }

func (s *silence) every() time.Duration { return s.timeout / probesPerTimeout }

// dead reports whether the wait has lasted the whole timeout.
func (s *silence) dead(now time.Time) bool { return now.Sub(s.since) >= s.timeout }

// probeDue reports whether to send a status update that requests a reply: after a quarter of
// the timeout of silence, and again every quarter while it lasts.
func (s *silence) probeDue(now time.Time) bool {
	if s.probed.IsZero() {
		return now.Sub(s.since) >= s.every()
	}
	return now.Sub(s.probed) >= s.every()
}

// next is when the wait next needs attention: a probe, or the end of the timeout.
func (s *silence) next() time.Time {
	end := s.since.Add(s.timeout)
	probe := s.since.Add(s.every())
	if !s.probed.IsZero() {
		probe = s.probed.Add(s.every())
	}
	if probe.Before(end) {
		return probe
	}
	return end
}

// Reconnect backoff: it starts at backoffMin, doubles per failed attempt up to ReconnectMax, and
// returns to backoffMin after a session that streamed for at least backoffReset, so that a
// relay that reconnects once a day after a healthy day waits 100ms, not ReconnectMax.
const (
	backoffMin   = 100 * time.Millisecond
	backoffReset = time.Minute
)

// nextBackoff returns the wait before the next attempt and the one after it, given the current
// backoff and how long the session that just ended streamed (zero if it never did).
func nextBackoff(cur, streamed, maxWait time.Duration) (wait, after time.Duration) {
	if streamed >= backoffReset {
		cur = backoffMin
	}
	return cur, min(cur*2, maxWait)
}
