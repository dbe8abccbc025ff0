package relay

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// proxied returns a freeze proxy in front of the test's cluster and the test's DSN through it.
func (e *env) proxied() (*relaytest.Proxy, string) {
	e.t.Helper()
	p, err := relaytest.NewProxyFor(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	dsn, err := p.DSN(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	return p, dsn
}

// setWalSenderTimeout sets wal_sender_timeout for the test's database, which its walsenders
// take up.
func (e *env) setWalSenderTimeout(v string) {
	e.t.Helper()
	_, err := e.pool.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{e.dbName()}.Sanitize()+
		` SET wal_sender_timeout = '`+v+`'`)
	if err != nil {
		e.t.Fatal(err)
	}
}

// walSender returns the pid of the walsender streaming the test's slot and the last time it
// heard from the relay (pg_stat_replication.reply_time), or 0 when none streams or it has not
// heard from the relay yet.
func (e *env) walSender() (pid int, reply time.Time) {
	e.t.Helper()
	_ = e.pool.QueryRow(context.Background(), `
		SELECT s.active_pid, r.reply_time
		FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1 AND r.reply_time IS NOT NULL`, e.slot).Scan(&pid, &reply)
	return pid, reply
}

// The seen case: every connection of the relay frozen by a TCP proxy (no FIN, no RST) while
// the server's wal_sender_timeout is 4s and the relay's replication timeout is left to follow
// it. The relay notices within a bound derived from the timeout: streaming goes to 0, a
// reconnect is counted, /readyz answers 503. After the thaw, everything written during the
// freeze is delivered, in order, nothing lost.
func TestFrozenConnectionIsNoticed(t *testing.T) {
	// Not parallel: a short wal_sender_timeout must not be missed on a machine loaded by parallel tests.
	e := newEnv(t)
	const walSenderTimeout = 4 * time.Second
	e.setWalSenderTimeout("4s")
	proxy, dsn := e.proxied()
	var addr atomic.Value
	r := e.start(func(c *Config) {
		c.DSN = dsn
		withHTTP(&addr)(c)
	})
	w := &seqWriter{seq: map[string]int{}}
	w.write(t, e, 50, 5)
	requireOK(t, e.waitDelivered(relaytest.Result{Committed: w.done}, 30*time.Second))
	waitFor(t, 10*time.Second, "ready", func() bool { code, _ := get(t, &addr, "/readyz"); return code == 200 })

	proxy.Freeze()
	frozen := time.Now()
	w.write(t, e, 100, 5) // straight to the server: the producers are not partitioned
	// Silence for the whole timeout ends the session; probes start after a quarter of it. The
	// bound leaves room for a loaded machine, and is far below TCP's 15 minutes.
	bound := 3*walSenderTimeout + 10*time.Second
	waitFor(t, bound, "the frozen connection noticed", func() bool {
		return r.metric(t, "outbox_relay_streaming") == 0 && r.metric(t, "outbox_relay_reconnects_total") >= 1
	})
	noticed := time.Since(frozen)
	if code, body := get(t, &addr, "/readyz"); code != 503 || !strings.Contains(body, "not streaming") {
		t.Fatalf("/readyz during the partition = %d %q, want 503 not streaming", code, body)
	}
	if noticed < walSenderTimeout/2 {
		t.Fatalf("noticed %s after the freeze: before the timeout could have passed", noticed)
	}
	t.Logf("frozen connection noticed after %s (replication timeout %s)", noticed.Round(time.Millisecond), walSenderTimeout)

	proxy.Thaw()
	w.write(t, e, 50, 5)
	rep := e.waitDelivered(relaytest.Result{Committed: w.done}, time.Minute)
	requireOK(t, rep)
	waitFor(t, 30*time.Second, "streaming again", func() bool {
		code, _ := get(t, &addr, "/readyz")
		return code == 200 && r.metric(t, "outbox_relay_streaming") == 1
	})
}

// A healthy connection to an idle server may be silent for long (the walsender pings only a
// client that has not replied for half of wal_sender_timeout, and the relay replies often): the
// relay's probes keep it alive. With a 2s replication timeout and the server's at 60s, several
// timeouts of idleness end no session. The same relay then notices a freeze, so the counter
// that stayed at 0 is the one that moves.
func TestHealthyIdleConnectionIsNotCut(t *testing.T) {
	// Not parallel: a short wal_sender_timeout must not be missed on a machine loaded by parallel tests.
	e := newEnv(t)
	const timeout = 2 * time.Second
	e.setWalSenderTimeout("60s")
	proxy, dsn := e.proxied()
	r := e.start(func(c *Config) {
		c.DSN = dsn
		c.ReplicationTimeout = timeout
	})
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	var pid int
	var since time.Time
	waitFor(t, 10*time.Second, "a walsender streams", func() bool {
		pid, since = e.walSender()
		return pid != 0
	})
	// Idle for five timeouts, measured on the server: the same walsender keeps hearing from the
	// relay for that long.
	waitFor(t, time.Minute, "five idle timeouts on one connection", func() bool {
		p, reply := e.walSender()
		if p != pid {
			t.Fatalf("the walsender changed from %d to %d: the idle connection was cut", pid, p)
		}
		return reply.Sub(since) >= 5*timeout
	})
	if n := r.metric(t, "outbox_relay_reconnects_total"); n != 0 {
		t.Fatalf("%v reconnects on a healthy idle connection", n)
	}
	if s := r.metric(t, "outbox_relay_streaming"); s != 1 {
		t.Fatalf("outbox_relay_streaming = %v on a healthy idle connection", s)
	}

	proxy.Freeze() // positive control
	waitFor(t, 3*timeout+10*time.Second, "the frozen connection noticed", func() bool {
		return r.metric(t, "outbox_relay_reconnects_total") >= 1
	})
	proxy.Thaw()
}
