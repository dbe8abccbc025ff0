package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The 410 fault of an endpoints run (issue 38: "a 410, then `endpoint enable`, and the held
// events never come"): one enabled endpoint at a time answers 410 Gone to every request until
// the relay disables it, as the guide says it does at once; a little later the partner has
// fixed its server and the operator runs `outbox-relay endpoint enable`. What the endpoint was
// owed at the disable must then arrive, first and in order; the checks require it.
//
// The relay's disable is not made under the manager's lock, so its commit is only bounded in
// the WAL: after pg_current_wal_lsn() read just before the receiver answers the first 410 (Lo),
// before the one read once the row says disabled (After). Transactions committed inside that window are uncertain for
// that endpoint (epcheck.go). The enable runs the command while the manager holds the lock, so
// it is placed exactly like the manager's own changes.

// goneWait bounds the wait for the relay to disable an endpoint that answers 410: a relay needs
// an event routed to it first.
const goneWait = 10 * time.Second

// gones runs the 410 fault every 4–8s, on a seeded stream of its own, until load ends; an
// episode under way finishes under ctx. It returns how many endpoints the relay disabled.
func (m *epManager) gones(load, ctx context.Context) int {
	defer m.hookGone()()
	rng := mrand.New(mrand.NewPCG(m.cfg.Seed, 0x410))
	n := 0
	for sleep(load, 4*time.Second+time.Duration(rng.Int64N(int64(4*time.Second)))) {
		id, ok := m.reserveEnabled(rng)
		if !ok {
			continue
		}
		delay := 500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
		ok, err := m.gone(load, ctx, id, delay)
		if err != nil && ctx.Err() == nil {
			m.fail(fmt.Sprintf("410 of %s: %v", id, err))
		}
		if ok {
			n++
		}
		m.mu.Lock()
		delete(m.busy, id)
		m.mu.Unlock()
	}
	return n
}

// reserveEnabled draws an enabled endpoint that nothing else is working on and is not blacked
// out, and marks it busy.
func (m *epManager) reserveEnabled(rng *mrand.Rand) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, v := range m.cur {
		if v.State == stEnabled && !m.busy[id] && !m.recv.blackedOutNow(id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", false
	}
	sort.Strings(ids)
	id := ids[rng.IntN(len(ids))]
	m.busy[id] = true
	return id, true
}

// gone makes endpoint id answer 410 until the relay disables it, records that disable in the
// timeline, waits delay and enables it with the command. It returns whether the relay
// disabled it. The waits end with load (the run must not outlast its duration for an
// episode); what must still be done (settling the disable, the enable) finishes under ctx.
func (m *epManager) gone(load, ctx context.Context, id string, delay time.Duration) (bool, error) {
	conn, err := m.goneConn(ctx)
	if err != nil {
		return false, err
	}
	defer func() { conn.Close(context.Background()) }()
	lo, err := readLSN(ctx, conn, "pg_current_wal_lsn()")
	if err != nil {
		return false, nil // the server is away (a fault): try another time
	}
	m.setGoneLo(id, 0)
	m.recv.setGone(id, true)
	from := time.Now()
	disabled := m.waitDisabled(load, conn, id, goneWait)
	answered := m.recv.setGone(id, false)
	m.mu.Lock()
	m.blackoutLog = append(m.blackoutLog, span{What: "410 Gone from " + id, ID: id, From: from, To: time.Now()})
	m.mu.Unlock()
	if !disabled && !answered {
		return false, nil // no 410 left the receiver: the relay has nothing to disable it for
	}
	if !disabled {
		// A 410 answered just now may still be turning into a disable: look once more, on a
		// fresh connection, after the relay has had time to commit it. (finish checks that
		// the rows end as the timeline says.)
		if !sleep(ctx, 2*time.Second) {
			return false, nil
		}
		conn.Close(context.Background())
		if conn, err = m.goneConn(ctx); err != nil {
			return false, err
		}
		if disabled = m.waitDisabled(ctx, conn, id, 5*time.Second); !disabled {
			return false, nil
		}
	}
	hi, err := readLSN(ctx, conn, "pg_current_wal_lsn()")
	if err != nil {
		return false, fmt.Errorf("read the WAL position after the disable: %w", err)
	}
	m.mu.Lock()
	if l := m.goneLo[id]; l > lo {
		lo = l // read just before the first 410 was answered
	}
	v := m.cur[id]
	v.Op, v.State, v.At, v.Lo, v.Before, v.After = opGone, stDisabled, time.Now(), lo, 0, hi
	m.tl[id] = append(m.tl[id], v)
	m.cur[id] = v
	m.stats.Committed[opGone]++
	m.stats.Gone++
	m.mu.Unlock()
	m.logf("endpoint %s answered 410 Gone and was disabled by the relay; enabling it in %s", id, delay.Round(time.Millisecond))
	if !sleep(load, delay) && ctx.Err() != nil {
		return true, nil // finish enables it
	}
	m.mu.Lock()
	ch := m.changeOf(opEnable, id)
	m.mu.Unlock()
	ch.CLI = true
	for {
		ok, err := m.apply(ctx, ch)
		if ok || err != nil {
			return true, err
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return true, nil
		}
	}
}

// hookGone makes the receiver read the WAL position just before it answers an episode's first
// 410 (goneLo): the relay's disable commits after it, and the window of uncertain
// transactions shrinks to the relay's reaction. It runs under the receiver's goneMu, which
// serializes the look-ups on loConn. close ends its connection.
func (m *epManager) hookGone() (close func()) {
	var loConn *pgx.Conn
	hook := func(id string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if loConn == nil || loConn.IsClosed() {
			c, err := pgx.Connect(ctx, m.dsn)
			if err != nil {
				return // the earlier bound stands
			}
			loConn = c
		}
		lsn, err := readLSN(ctx, loConn, "pg_current_wal_lsn()")
		if err != nil {
			loConn.Close(ctx)
			loConn = nil
			return
		}
		m.setGoneLo(id, lsn)
	}
	m.recv.goneHook.Store(&hook)
	return func() {
		m.recv.goneHook.Store(nil)
		m.recv.goneMu.Lock()
		defer m.recv.goneMu.Unlock()
		if loConn != nil {
			loConn.Close(context.Background())
		}
	}
}

func (m *epManager) setGoneLo(id string, lsn pglogrepl.LSN) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.goneLo == nil {
		m.goneLo = map[string]pglogrepl.LSN{}
	}
	m.goneLo[id] = lsn
}

// waitDisabled polls id's row until it says disabled, for at most limit (0: once).
func (m *epManager) waitDisabled(ctx context.Context, conn *pgx.Conn, id string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		var state string
		err := conn.QueryRow(ctx, `SELECT state FROM outbox_endpoints WHERE id = $1`, id).Scan(&state)
		if err == nil && state == stDisabled {
			return true
		}
		if time.Now().After(deadline) || !sleep(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// goneConn is the 410 fault's own connection, apart from the manager's (whose backends a
// settle ends), retried while the server is away.
func (m *epManager) goneConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(m.dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = "torture-endpoints-410"
	cfg.ConnectTimeout = 5 * time.Second
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			return conn, nil
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}
