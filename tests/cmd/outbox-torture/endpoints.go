package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The endpoints run (TORTURE_ENDPOINTS=1): the relays run with --endpoints and fan the slot out
// to the rows of outbox_endpoints, which the endpoint manager below changes during the load with
// plain SQL, as an application would.
//
// # Which endpoint state was in force at an event's commit
//
// Routing follows the endpoint versions committed before each transaction (rule 4 of issue 24),
// so the checks must know, for every transaction and every endpoint change, which committed
// first. Every change runs in a transaction that first takes LOCK TABLE outbox_events IN
// EXCLUSIVE MODE (it conflicts with the ROW EXCLUSIVE lock of an INSERT, not with readers), then
// reads clock_timestamp() as the change's time tL, then changes the row and commits. Each
// transaction of the writers puts clock_timestamp() into the payload of its first INSERT, which
// the server evaluates once that INSERT holds its ROW EXCLUSIVE lock, kept until the
// transaction ends. On one server clock:
//
//   - a transaction whose first insert is before tL held its lock before the change got its
//     own, so it had ended, committed, before the LOCK was granted: before the change's commit;
//   - one whose first insert is after tL could not hold its lock while the change held the
//     EXCLUSIVE one, so it got it after the change committed, and commits after it.
//
// A commit releases its locks only after its commit record is in the WAL, so the commit order
// so found is the order of the commit LSNs the relay routes by. The checks then treat each
// endpoint's changes as a timeline of versions and look up, for each transaction, the version
// in force at its time.
//
// A change whose COMMIT fails with the connection is settled like a writer's: once no backend
// of the manager is left, the row says whether it committed (it exists, is gone, or carries the
// change's updated_at). Only committed changes enter the timeline.

// Endpoint changes, as the timeline records them.
const (
	opAdd     = "add"
	opUpdate  = "update"
	opPause   = "pause"
	opResume  = "resume"
	opDisable = "disable"
	opEnable  = "enable"
	opRemove  = "remove"
	// opGone is the relay's own disable of an endpoint that answered 410 Gone (gone.go);
	// never drawn by pick.
	opGone = "disable-410"
)

var epOps = []string{opAdd, opUpdate, opPause, opResume, opDisable, opEnable, opRemove, opGone}

// Endpoint states, as the table spells them.
const (
	stEnabled  = "enabled"
	stPaused   = "paused"
	stDisabled = "disabled"
)

// epVersion is one endpoint's state from At, the time of the change that made it, until its
// next version.
type epVersion struct {
	At         time.Time
	Op         string
	Exists     bool // false from a removal on
	State      string
	Tenant     string   // "" for every tenant
	EventTypes []string // patterns
	AggTypes   []string // nil for every aggregate type
	// Before and After bound the change's commit record, read like a writer's (txRecord):
	// pg_current_wal_insert_lsn() before COMMIT, pg_current_wal_lsn() once it returned; 0 if
	// unknown. The checks place transactions by Before (epVersion.after) and cross-check the
	// clock method against the WAL.
	Before, After pglogrepl.LSN
	// Lo is set on a change the relay made itself, outside the lock (the disable after a 410
	// Gone, gone.go): its commit lies somewhere in [Lo, After], and Before is 0. A transaction
	// committed inside that window cannot be placed: its pairs with the endpoint are uncertain.
	Lo pglogrepl.LSN
}

// subscribed reports whether e is in v's subscription (the state aside): the tenant (an
// endpoint without one takes every event, an event without one goes only to such endpoints),
// an event-type pattern and, if v lists any, the aggregate type. It is written apart from the
// relay's internal/endpoint on purpose: the check must not share the code it checks.
func (v epVersion) subscribed(e event) bool {
	if v.Tenant != "" && v.Tenant != e.Tenant {
		return false
	}
	match := false
	for _, p := range v.EventTypes {
		switch {
		case p == "*":
			match = true
		case len(p) > 2 && p[len(p)-2:] == ".*":
			prefix := p[:len(p)-1]
			match = len(e.EventType) > len(prefix) && e.EventType[:len(prefix)] == prefix
		default:
			match = p == e.EventType
		}
		if match {
			break
		}
	}
	return match && (v.AggTypes == nil || slices.Contains(v.AggTypes, e.AggType))
}

// timeline is every endpoint's versions, by id, each in the order committed.
type timeline map[string][]epVersion

// changeStats counts the endpoint changes.
type changeStats struct {
	Committed    map[string]int // per op
	NotCommitted int            // failed before or at COMMIT (or settled as not): not in the timeline
	Settled      int            // COMMIT outcomes unknown at first, settled by look-up
	// RemovedQueued counts the removals drawn among blacked-out endpoints (events queued);
	// Gone the endpoints that answered 410 and were disabled by the relay, then enabled.
	RemovedQueued, Gone int
	Failures            []string // the manager could not do what the run needs (the final resumes and enables)
}

// epSubscriptions are the event-type pattern lists and aggregate-type lists endpoints draw from.
var (
	epPatterns = [][]string{{"*"}, {"order.*"}, {"invoice.*"}, {"customer.*"}, {"order.created", "invoice.paid"},
		{"order.paid", "order.shipped"}, {"invoice.*", "customer.updated"}, {"order.*", "customer.*"}, {"invoice.paid"}}
	epAggTypes = [][]string{nil, nil, nil, {"order"}, {"invoice"}, {"customer"}, {"order", "invoice"}, {"invoice", "customer"}}
)

// epManager owns outbox_endpoints during a run: it creates the first endpoints, changes them on
// a seeded schedule during the load and resumes the paused ones at its end.
type epManager struct {
	cfg     config
	dsn     string
	base    string // the receiver's URL up to /ep/
	recv    *receiver
	rng     *mrand.Rand
	logf    func(string, ...any)
	appName string
	conn    *pgx.Conn

	// applyMu serializes apply: the changes, the final resumes and the 410 fault's enables
	// share conn.
	applyMu sync.Mutex
	// bin is the relay binary, for `endpoint enable` after a 410 (gone.go).
	bin string

	mu   sync.Mutex
	tl   timeline
	cur  map[string]epVersion // the latest committed version of every endpoint that exists
	busy map[string]bool      // endpoints a change or the 410 fault is working on: pick leaves them
	// blackoutLog is every blackout and 410 episode, for a failed run's evidence.
	blackoutLog []span
	// goneLo is, per endpoint, the WAL position read before its 410 episode's first answer.
	goneLo map[string]pglogrepl.LSN
	next   int // the next new endpoint's number
	stats  changeStats
}

func newEpManager(cfg config, dsn, bin string, recv *receiver, logf func(string, ...any)) *epManager {
	return &epManager{cfg: cfg, dsn: dsn, bin: bin, base: recv.base + "/ep/", recv: recv, logf: logf,
		rng: mrand.New(mrand.NewPCG(cfg.Seed, 0xe9)), appName: "torture-endpoints", tl: timeline{},
		cur: map[string]epVersion{}, busy: map[string]bool{}, stats: changeStats{Committed: map[string]int{}}}
}

// epChange is one change to make: op on id, giving the version v (without its time).
type epChange struct {
	Op string
	ID string
	V  epVersion
	// CLI: make the change with `outbox-relay endpoint <op>` (enable only) while holding the
	// lock, as an operator would, instead of plain SQL.
	CLI bool
}

// setup creates the first cfg.EndpointCount endpoints, spread over the tenants, two of them
// without a tenant; it retries each until it commits.
func (m *epManager) setup(ctx context.Context) error {
	for i := 0; i < m.cfg.EndpointCount; i++ {
		ch := m.newEndpoint(i)
		for {
			ok, err := m.apply(ctx, ch)
			if err != nil {
				return fmt.Errorf("create endpoint %s: %w", ch.ID, err)
			}
			if ok {
				break
			}
			if !sleep(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// newEndpoint is the add of endpoint number n: tenant n mod the tenants, except every 25th,
// which has none; a random subscription; enabled, or now and then created paused.
func (m *epManager) newEndpoint(n int) epChange {
	m.next = max(m.next, n+1)
	tenant := tenantName(n%m.cfg.Tenants, m.cfg.Tenants)
	if n%25 == 24 {
		tenant = ""
	}
	v := epVersion{Op: opAdd, Exists: true, State: stEnabled, Tenant: tenant}
	v.EventTypes, v.AggTypes = m.subscription()
	if m.rng.IntN(10) == 0 {
		v.State = stPaused
	}
	return epChange{Op: opAdd, ID: fmt.Sprintf("ep-%03d", n), V: v}
}

func (m *epManager) subscription() ([]string, []string) {
	return epPatterns[m.rng.IntN(len(epPatterns))], epAggTypes[m.rng.IntN(len(epAggTypes))]
}

// run changes endpoints every ChangeMin–ChangeMax until load ends; a change under way finishes
// under ctx.
func (m *epManager) run(load, ctx context.Context) {
	for {
		gap := m.cfg.ChangeMin
		if d := m.cfg.ChangeMax - m.cfg.ChangeMin; d > 0 {
			gap += time.Duration(m.rng.Int64N(int64(d)))
		}
		if !sleep(load, gap) {
			return
		}
		m.mu.Lock()
		ch, ok := m.pick()
		if ok {
			m.busy[ch.ID] = true
		}
		m.mu.Unlock()
		if !ok {
			continue
		}
		if _, err := m.apply(ctx, ch); err != nil && ctx.Err() == nil {
			m.fail(fmt.Sprintf("%s %s: %v", ch.Op, ch.ID, err))
		}
		m.mu.Lock()
		delete(m.busy, ch.ID)
		m.mu.Unlock()
	}
}

// blackouts black out one endpoint at a time, drawn from those that exist, for 2–5s every
// 0.5–2s until load ends, each long past the relays' --spill-after: the endpoint spills its
// events to its backlog, drains it once the blackout ends and rejoins the live stream, while the
// other faults (relay kills above all) land in the middle of that. It has a seeded stream of its
// own, apart from the changes'. It returns how many it started.
func (m *epManager) blackouts(load context.Context) int {
	rng := mrand.New(mrand.NewPCG(m.cfg.Seed, 0xb1))
	n := 0
	for {
		if !sleep(load, 500*time.Millisecond+time.Duration(rng.Int64N(int64(1500*time.Millisecond)))) {
			return n
		}
		m.mu.Lock()
		ids := make([]string, 0, len(m.cur))
		for id := range m.cur {
			if !m.busy[id] {
				ids = append(ids, id)
			}
		}
		m.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		sort.Strings(ids)
		id, d := ids[rng.IntN(len(ids))], 2*time.Second+time.Duration(rng.Int64N(int64(3*time.Second)))
		m.recv.blackout(id, d)
		m.mu.Lock()
		m.blackoutLog = append(m.blackoutLog, span{What: "blackout of " + id, ID: id, From: time.Now(), To: time.Now().Add(d)})
		m.mu.Unlock()
		n++
	}
}

// pick draws the next change from the endpoints as they are: mostly subscription updates,
// pauses and resumes, some disables and enables, and adds and removals that keep the count
// near EndpointCount. A paused endpoint is only resumed, disabled or removed, never updated.
// Half the removals, when an endpoint is blacked out, take that one: it has events queued,
// in memory or spilled to its backlog (issue 38: nothing left pending after such a removal).
// The caller holds mu.
func (m *epManager) pick() (epChange, bool) {
	var enabled, paused, disabled []string
	for id, v := range m.cur {
		if m.busy[id] {
			continue
		}
		switch v.State {
		case stEnabled:
			enabled = append(enabled, id)
		case stPaused:
			paused = append(paused, id)
		case stDisabled:
			disabled = append(disabled, id)
		}
	}
	sort.Strings(enabled)
	sort.Strings(paused)
	sort.Strings(disabled)
	op := m.drawOp()
	var from []string
	switch op {
	case opAdd:
		return m.newEndpoint(m.next), true
	case opUpdate, opPause:
		from = enabled
	case opResume:
		from = paused
	case opEnable:
		from = disabled
	case opDisable:
		from = slices.Concat(enabled, paused)
	case opRemove:
		from = slices.Concat(enabled, paused, disabled)
		var queued []string
		for _, id := range from {
			if m.recv.blackedOutNow(id) {
				queued = append(queued, id)
			}
		}
		sort.Strings(queued)
		if len(queued) > 0 && m.rng.IntN(2) == 0 {
			m.stats.RemovedQueued++
			return m.changeOf(op, queued[m.rng.IntN(len(queued))]), true
		}
	}
	if len(from) == 0 {
		return epChange{}, false
	}
	return m.changeOf(op, from[m.rng.IntN(len(from))]), true
}

// drawOp draws the kind of the next change, adds and removals weighted to keep the count of
// endpoints near EndpointCount.
func (m *epManager) drawOp() string {
	weights := map[string]int{opUpdate: 25, opPause: 15, opResume: 25, opDisable: 8, opEnable: 10, opAdd: 8, opRemove: 8}
	if live := len(m.cur); live < m.cfg.EndpointCount {
		weights[opAdd], weights[opRemove] = 16, 4
	} else if live > m.cfg.EndpointCount {
		weights[opAdd], weights[opRemove] = 4, 16
	}
	total := 0
	for _, op := range epOps {
		total += weights[op]
	}
	r := m.rng.IntN(total)
	for _, op := range epOps {
		if r -= weights[op]; r < 0 {
			return op
		}
	}
	return opUpdate
}

// changeOf is change op of endpoint id, from its current version.
func (m *epManager) changeOf(op, id string) epChange {
	v := m.cur[id]
	v.Op = op
	switch op {
	case opUpdate:
		v.EventTypes, v.AggTypes = m.subscription()
	case opPause:
		v.State = stPaused
	case opResume, opEnable:
		v.State = stEnabled
	case opDisable:
		v.State = stDisabled
	case opRemove:
		v.Exists = false
	}
	return epChange{Op: op, ID: id, V: v}
}

// finish resumes every paused endpoint and enables every disabled one, retrying each until it
// commits, so that what they hold (paused, or kept in the backlog at the disable) must drain:
// the checks then require it.
func (m *epManager) finish(ctx context.Context) {
	var held []string
	for id, v := range m.cur {
		if v.State != stEnabled {
			held = append(held, id)
		}
	}
	sort.Strings(held)
	for _, id := range held {
		v := m.cur[id]
		op := opResume
		if v.State == stDisabled {
			op = opEnable
		}
		v.Op, v.State = op, stEnabled
		for {
			ok, err := m.apply(ctx, epChange{Op: op, ID: id, V: v})
			if err != nil {
				m.fail(fmt.Sprintf("final %s of %s: %v", op, id, err))
				break
			}
			if ok || !sleep(ctx, 100*time.Millisecond) {
				break
			}
		}
	}
	m.logf("endpoints: %s; resumed or enabled the %d still paused or disabled", m.summary(), len(held))
	if err := m.compareRows(ctx); err != nil {
		m.fail(err.Error())
	}
	m.drop()
}

// compareRows checks that outbox_endpoints ends as the timeline says: every endpoint the
// manager kept exists, enabled, and no other. A mismatch means a change the timeline missed
// (the relay's disable after a 410 noticed too late, say): the checks could not be trusted.
func (m *epManager) compareRows(ctx context.Context) error {
	var rows map[string]string
	err := readRetrying(ctx, func() error {
		conn, err := m.connection(ctx)
		if err != nil {
			return err
		}
		rs, err := conn.Query(ctx, `SELECT id, state FROM outbox_endpoints`)
		if err != nil {
			m.drop()
			return err
		}
		rows = map[string]string{}
		for rs.Next() {
			var id, state string
			if err := rs.Scan(&id, &state); err != nil {
				m.drop()
				return err
			}
			rows[id] = state
		}
		if err := rs.Err(); err != nil {
			m.drop()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read outbox_endpoints at the end: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var diff []string
	for id, v := range m.cur {
		if rows[id] != v.State {
			diff = append(diff, fmt.Sprintf("%s is %q, the timeline says %s", id, rows[id], v.State))
		}
	}
	for id := range rows {
		if _, ok := m.cur[id]; !ok {
			diff = append(diff, id+" exists, the timeline says removed")
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		return fmt.Errorf("outbox_endpoints does not end as the timeline says: %s", strings.Join(diff, "; "))
	}
	return nil
}

func (m *epManager) fail(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Failures = append(m.stats.Failures, s)
}

func (m *epManager) summary() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := fmt.Sprintf("%d endpoints live of %d created", len(m.cur), len(m.tl))
	for _, op := range epOps {
		s += fmt.Sprintf(", %s %d", op, m.stats.Committed[op])
	}
	return s
}

// snapshot returns a copy of the timeline and the stats.
func (m *epManager) snapshot() (timeline, changeStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tl := make(timeline, len(m.tl))
	for id, vs := range m.tl {
		tl[id] = slices.Clone(vs)
	}
	st := m.stats
	st.Committed = map[string]int{}
	for k, v := range m.stats.Committed {
		st.Committed[k] = v
	}
	st.Failures = slices.Clone(m.stats.Failures)
	return tl, st
}

// changeLockTimeout bounds the wait for the EXCLUSIVE lock: a relay connection frozen by a
// partition may hold a ROW EXCLUSIVE lock (its status marks) until the thaw, and the writers
// queue behind the waiting LOCK meanwhile. A change that times out is not made.
const changeLockTimeout = "2s"

// apply makes one change in its own transaction, as the header comment says, and records it in
// the timeline if it committed. It returns false when it did not commit (the server away, the
// lock not granted in time); an error only when ctx ends or the table refused the change.
func (m *epManager) apply(ctx context.Context, ch epChange) (bool, error) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	ok, err := m.attempt(ctx, ch)
	if !ok {
		m.mu.Lock()
		m.stats.NotCommitted++
		m.mu.Unlock()
	}
	return ok, err
}

func (m *epManager) attempt(ctx context.Context, ch epChange) (bool, error) {
	if ch.Op == opAdd {
		m.recv.allow(ch.ID, newSecret(ch.ID)) // before the row can commit: the relay may deliver at once
	}
	conn, err := m.connection(ctx)
	if err != nil {
		return false, err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := conn.Begin(actx)
	if err != nil {
		m.drop()
		return false, ctx.Err()
	}
	at, err := m.change(actx, tx, ch)
	var before pglogrepl.LSN
	if err == nil {
		before, err = readLSN(actx, tx, "pg_current_wal_insert_lsn()")
	}
	var cliErr *cliError
	if errors.As(err, &cliErr) {
		m.drop()
		return false, err
	}
	if err != nil {
		m.drop()
		var pgErr *pgconn.PgError
		// 55P03: the lock timeout; 57, 08: the server or the connection went; 40: a deadlock
		// or serialization failure. Anything else is the table refusing the change: the
		// manager is wrong.
		if errors.As(err, &pgErr) && pgErr.Code != "55P03" && !slices.Contains([]string{"57", "08", "40"}, pgErr.Code[:2]) {
			return false, err
		}
		return false, ctx.Err()
	}
	if err := tx.Commit(actx); err != nil {
		m.drop()
		if ch.CLI {
			// The command committed the change while the lock was held, and before was read
			// after it returned: only the lock's release failed.
			m.record(ch, at, before, m.walLSN(ctx), false)
			return true, nil
		}
		if pgconn.SafeToRetry(err) {
			return false, nil
		}
		ok, err := m.settle(ctx, ch, at)
		if ok {
			m.record(ch, at, before, m.walLSN(ctx), true)
		}
		return ok, err
	}
	m.record(ch, at, before, m.walLSN(ctx), false)
	return true, nil
}

// walLSN reads pg_current_wal_lsn(), reconnecting while the server is away; 0 if ctx ends.
func (m *epManager) walLSN(ctx context.Context) pglogrepl.LSN {
	for {
		conn, err := m.connection(ctx)
		if err != nil {
			return 0
		}
		if lsn, err := readLSN(ctx, conn, "pg_current_wal_lsn()"); err == nil {
			return lsn
		}
		m.drop()
		if !sleep(ctx, 100*time.Millisecond) {
			return 0
		}
	}
}

// change takes the lock, reads tL and makes the change in tx; it returns tL.
func (m *epManager) change(ctx context.Context, tx pgx.Tx, ch epChange) (time.Time, error) {
	var at time.Time
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+changeLockTimeout+"'"); err != nil {
		return at, err
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE outbox_events IN EXCLUSIVE MODE"); err != nil {
		return at, err
	}
	if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		return at, err
	}
	v := ch.V
	var tag pgconn.CommandTag
	var err error
	switch ch.Op {
	case opAdd:
		secrets, _ := json.Marshal([]map[string]string{{"secret": m.recv.secret(ch.ID)}})
		tag, err = tx.Exec(ctx, `INSERT INTO outbox_endpoints (id, url, secrets, tenant_id, event_types, aggregate_types,
			state, paused_at, paused_reason, created_at, updated_at)
			VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6, $7, CASE WHEN $7 = 'paused' THEN $8::timestamptz END,
			CASE WHEN $7 = 'paused' THEN 'torture' END, $8, $8)`,
			ch.ID, m.base+ch.ID, string(secrets), v.Tenant, v.EventTypes, v.AggTypes, v.State, at)
	case opUpdate:
		tag, err = tx.Exec(ctx, `UPDATE outbox_endpoints SET event_types = $2, aggregate_types = $3, updated_at = $4 WHERE id = $1`,
			ch.ID, v.EventTypes, v.AggTypes, at)
	case opPause:
		tag, err = tx.Exec(ctx, `UPDATE outbox_endpoints SET state = 'paused', paused_at = $2, paused_reason = 'torture',
			updated_at = $2 WHERE id = $1`, ch.ID, at)
	case opResume:
		tag, err = tx.Exec(ctx, `UPDATE outbox_endpoints SET state = 'enabled', paused_at = NULL, paused_reason = NULL,
			updated_at = $2 WHERE id = $1`, ch.ID, at)
	case opDisable:
		tag, err = tx.Exec(ctx, `UPDATE outbox_endpoints SET state = 'disabled', disabled_at = $2, disabled_reason = 'torture',
			paused_at = NULL, paused_reason = NULL, updated_at = $2 WHERE id = $1`, ch.ID, at)
	case opEnable:
		if ch.CLI {
			return at, m.cli(ctx, "endpoint", "enable", ch.ID)
		}
		tag, err = tx.Exec(ctx, `UPDATE outbox_endpoints SET state = 'enabled', disabled_at = NULL, disabled_reason = NULL,
			updated_at = $2 WHERE id = $1`, ch.ID, at)
	case opRemove:
		tag, err = tx.Exec(ctx, `DELETE FROM outbox_endpoints WHERE id = $1`, ch.ID)
	}
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%s changed %d rows, want 1: the manager's view of outbox_endpoints is wrong", ch.Op, tag.RowsAffected())
	}
	return at, err
}

// cliError is a relay command the manager ran that failed.
type cliError struct{ err error }

func (e *cliError) Error() string { return e.err.Error() }

// cli runs `outbox-relay args... --dsn` as an operator would; its output goes into the error.
func (m *epManager) cli(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, m.bin, append(args, "--dsn", m.dsn)...).CombinedOutput()
	if err != nil {
		return &cliError{fmt.Errorf("outbox-relay %s: %w: %s", strings.Join(args, " "), err, out)}
	}
	return nil
}

// record enters a committed change into the timeline and the current state.
func (m *epManager) record(ch epChange, at time.Time, before, after pglogrepl.LSN, settled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := ch.V
	// Lo belongs to the relay's own disable (gone.go), which ch.V may have been copied from:
	// the manager's changes are placed by before.
	v.At, v.Before, v.After, v.Lo = at, before, after, 0
	m.tl[ch.ID] = append(m.tl[ch.ID], v)
	if v.Exists {
		m.cur[ch.ID] = v
	} else {
		delete(m.cur, ch.ID)
	}
	m.stats.Committed[ch.Op]++
	if settled {
		m.stats.Settled++
	}
}

// settle finds out whether a change whose COMMIT failed committed, once no older backend of
// the manager is left to commit it: the row exists (an add), is gone (a removal), or carries
// the change's updated_at.
func (m *epManager) settle(ctx context.Context, ch epChange, at time.Time) (bool, error) {
	for {
		conn, err := m.connection(ctx)
		if err != nil {
			return false, err
		}
		ok, err := m.lookUp(ctx, conn, ch, at)
		if err == nil {
			return ok, nil
		}
		m.drop()
		if !sleep(ctx, 100*time.Millisecond) {
			return false, ctx.Err()
		}
	}
}

func (m *epManager) lookUp(ctx context.Context, conn *pgx.Conn, ch epChange, at time.Time) (bool, error) {
	if err := endBackends(ctx, conn, m.appName); err != nil {
		return false, err
	}
	var n int
	var err error
	switch ch.Op {
	case opAdd:
		err = conn.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoints WHERE id = $1`, ch.ID).Scan(&n)
	case opRemove:
		err = conn.QueryRow(ctx, `SELECT 1 - count(*) FROM outbox_endpoints WHERE id = $1`, ch.ID).Scan(&n)
	default:
		err = conn.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoints WHERE id = $1 AND updated_at = $2`, ch.ID, at).Scan(&n)
	}
	return n == 1, err
}

// endBackends ends every other backend named app and waits until they are gone.
func endBackends(ctx context.Context, conn *pgx.Conn, app string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&left)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("an old backend of " + app + " does not go away")
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (m *epManager) connection(ctx context.Context) (*pgx.Conn, error) {
	if m.conn != nil && !m.conn.IsClosed() {
		return m.conn, nil
	}
	cfg, err := pgx.ParseConfig(m.dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = m.appName
	cfg.ConnectTimeout = 5 * time.Second
	backoff := 50 * time.Millisecond
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			m.conn = conn
			return conn, nil
		}
		if !sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (m *epManager) drop() {
	if m.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = m.conn.Close(ctx)
		cancel()
		m.conn = nil
	}
}

// newSecret is a fresh x-signature secret for endpoint id.
func newSecret(id string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "torture-" + id + "-" + hex.EncodeToString(b[:])
}
