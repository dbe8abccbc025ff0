package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// settleLimit bounds the wait for outbox_events to settle after the drain: the relays mark
// rows at their status interval (1s), so a few seconds are plenty.
const settleLimit = 30 * time.Second

// pendingRow is a row of outbox_events left pending.
type pendingRow struct {
	ID, What string
	Created  time.Time
}

// waitSettled waits, in an endpoints run once every required pair is delivered, until no row
// of outbox_events is left `pending` (issue 38: remove, disable, a 410 and a replay leave no
// row pending that no endpoint owes; the run has resumed and enabled every endpoint, so none
// owes anything any more). It returns the rows still pending at the limit (the oldest
// pendingMax of them).
func (t *harness) waitSettled(ctx context.Context) (int, []pendingRow) {
	deadline := time.Now().Add(settleLimit)
	for {
		n, some, err := pendingRows(ctx, t.outDSN)
		if err == nil && n == 0 {
			t.logf("outbox_events settled: no row pending")
			return 0, nil
		}
		if time.Now().After(deadline) || !sleep(ctx, sampleTick) {
			if err != nil {
				return -1, []pendingRow{{What: fmt.Sprintf("could not read outbox_events: %v", err)}}
			}
			t.logf("outbox_events: %d rows still pending %s after the drain", n, settleLimit)
			return n, some
		}
	}
}

// pendingMax bounds the pending rows read to be sorted (sortPending): past it, the rest count as
// violations.
const pendingMax = 20000

// pendingListed is how many rows left pending a report and its evidence describe.
const pendingListed = 20

// pendingRows counts the pending rows of outbox_events and describes the oldest pendingMax.
func pendingRows(ctx context.Context, dsn string) (int, []pendingRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, nil, err
	}
	rows, err := conn.Query(ctx, `SELECT id::text, aggregate_type || '/' || aggregate_id, event_type, coalesce(tenant_id, ''),
		created_at FROM outbox_events WHERE status = 'pending' ORDER BY created_at, id LIMIT $1`, pendingMax)
	if err != nil {
		return 0, nil, err
	}
	var some []pendingRow
	for rows.Next() {
		var id, agg, typ, tenant string
		var at time.Time
		if err := rows.Scan(&id, &agg, &typ, &tenant, &at); err != nil {
			return 0, nil, err
		}
		some = append(some, pendingRow{ID: id, Created: at,
			What: fmt.Sprintf("%s (%s, %s, tenant %q, created %s) pending", id, agg, typ, tenant, at.Format(stamp))})
	}
	return n, some, rows.Err()
}

// The done-marks are advisory and batched (docs/operations/marks.md, "Done-marks failing"): a
// relay writes them at its status interval (1s), retried with backoff while PostgreSQL refuses
// them, and one killed drops those still waiting (prune takes those rows once every slot
// confirmed them). A row left pending is excused when its last settle (its last delivery; or,
// delivered nowhere, its commit or the removal of an endpoint it was routed to) came shortly
// before a relay died: within markerKillWindow of the death of the relay that delivered it,
// anyKillWindow of any relay's, or, when it settled within markerKillWindow before a pg-restart
// or a partition or during one, before blockedBackoff after its end (the marks waited for the
// database). Any other row left pending is a violation.
const (
	markerKillWindow = 2 * time.Second
	anyKillWindow    = time.Second
	blockedBackoff   = 10 * time.Second
)

// sortPending splits the rows left pending into those a kill explains (afterKill, each with its
// settle and the kill named) and the others (violations), in the order given. Each relay marks a
// row once it has it delivered to every endpoint it was routed to, as that relay sees it (one
// taken from a backlog another relay spilled, say, is that relay's share): a row one relay
// delivered to every endpoint that got it is judged by that relay's last delivery; otherwise the
// share of each relay that delivered it was its own, and the death of any of them after its last
// delivery explains the row.
func (t *harness) sortPending(rows []pendingRow) (afterKill, violations []pendingRow) {
	kills := t.fleet.killList()
	blocked := t.faults.Blocked
	byID := map[string][]delivery{}
	for _, d := range t.recv.deliveries() {
		byID[d.ID] = append(byID[d.ID], d)
	}
	removals := t.removalsOf(rows, byID)
	for _, r := range rows {
		if r.ID == "" {
			violations = append(violations, r)
			continue
		}
		settles := relaySettles(byID[r.ID])
		if len(settles) == 0 {
			at, how := r.Created, "its commit, delivered nowhere"
			if rm, ok := removals[r.ID]; ok && rm.From.After(at) {
				at, how = rm.From, rm.What
			}
			settles = []delivery{{At: at, Endpoint: how}}
		}
		excused := false
		for _, d := range settles {
			how := d.Endpoint
			if d.Relay != 0 || d.ID != "" {
				how = fmt.Sprintf("its last delivery by relay-%d, to %s", d.Relay, d.Endpoint)
			}
			if k, ok := killAfter(kills, blocked, d.At, d.Relay); ok {
				r.What += fmt.Sprintf(" after a kill (advisory marks): settled at %s (%s), then %s at %s",
					d.At.Format(stamp), how, k.What, k.At.Format(stamp))
				afterKill, excused = append(afterKill, r), true
				break
			}
		}
		if !excused {
			d := settles[len(settles)-1]
			how := d.Endpoint
			if d.Relay != 0 || d.ID != "" {
				how = fmt.Sprintf("its last delivery by relay-%d, to %s", d.Relay, d.Endpoint)
			}
			r.What += fmt.Sprintf("; settled at %s (%s), no kill after it explains it", d.At.Format(stamp), how)
			violations = append(violations, r)
		}
	}
	return afterKill, violations
}

// relaySettles returns the deliveries of one row that can have settled it for a relay (see
// sortPending): the last delivery of a relay that delivered it to every endpoint any relay
// did, if one did (the latest such), else the last delivery of each relay, in time order.
func relaySettles(ds []delivery) []delivery {
	if len(ds) == 0 {
		return nil
	}
	all := map[string]bool{}
	eps := map[int]map[string]bool{}
	last := map[int]delivery{}
	for _, d := range ds {
		all[d.Endpoint] = true
		if eps[d.Relay] == nil {
			eps[d.Relay] = map[string]bool{}
		}
		eps[d.Relay][d.Endpoint] = true
		if l, ok := last[d.Relay]; !ok || d.At.After(l.At) {
			last[d.Relay] = d
		}
	}
	var full, each []delivery
	for relay, l := range last {
		each = append(each, l)
		if len(eps[relay]) == len(all) {
			full = append(full, l)
		}
	}
	byTime := func(ds []delivery) {
		sort.Slice(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
	}
	if len(full) > 0 {
		byTime(full)
		return full[len(full)-1:]
	}
	byTime(each)
	return each
}

// killAfter returns the first death of a relay that can have dropped the done-mark of a row
// settled at at whose delivery relay made (0: none, or unknown).
func killAfter(kills []killed, blocked []span, at time.Time, relay int) (killed, bool) {
	for _, k := range kills {
		if k.At.Before(at) {
			continue
		}
		after := k.At.Sub(at)
		if relay != 0 && k.Relay == relay && after <= markerKillWindow || after <= anyKillWindow {
			return k, true
		}
		for _, b := range blocked {
			// The mark still waited when the database went away (settled within the marks'
			// window before the span, or during it), and the relay died before the backoff
			// let it through.
			if !at.Before(b.From.Add(-markerKillWindow)) && !at.After(b.To) && !k.At.Before(b.From) &&
				k.At.Before(b.To.Add(blockedBackoff)) {
				k.What += " (marks waiting since the " + b.What + " at " + b.From.Format(stamp) + ")"
				return k, true
			}
		}
	}
	return killed{}, false
}

// removalsOf returns, for each of rows delivered nowhere, the first removal after its creation
// of an endpoint its commit routed it to: the relay settles such a row then (the removal gives
// up what the endpoint was owed), so its mark waits from there.
func (t *harness) removalsOf(rows []pendingRow, delivered map[string][]delivery) map[string]span {
	want := map[string]pendingRow{}
	for _, r := range rows {
		if len(delivered[r.ID]) == 0 && r.ID != "" {
			want[r.ID] = r
		}
	}
	out := map[string]span{}
	if len(want) == 0 || t.eps == nil {
		return out
	}
	tl, _ := t.eps.snapshot()
	t.ledger.mu.Lock()
	txs := t.ledger.txs
	t.ledger.mu.Unlock()
	commits := commitsOf(txs, t.recv.deliveries())
	ids := make([]string, 0, len(tl))
	for id := range tl {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, tx := range txs {
		for _, e := range tx.Events {
			r, ok := want[e.ID]
			if !ok {
				continue
			}
			for _, id := range ids {
				if p := rule(tl[id], posOf(tx, commits[i]), e); !p.Routed {
					continue
				}
				for _, v := range tl[id] {
					if !v.Exists && !v.At.Before(r.Created) {
						if rm, ok := out[e.ID]; !ok || v.At.Before(rm.From) {
							out[e.ID] = span{What: "the removal of " + id + ", an endpoint it was routed to", ID: id, From: v.At}
						}
						break
					}
				}
			}
		}
	}
	return out
}

// logPendingAfterKill says how many rows a kill left pending, and names a few.
func (t *harness) logPendingAfterKill(rows []pendingRow) {
	if len(rows) == 0 {
		return
	}
	t.logf("outbox_events: %d rows pending after a kill (advisory marks: their done-marks were dropped with the relay), e.g.", len(rows))
	for _, r := range rows[:min(len(rows), 3)] {
		t.logf("  %s", r.What)
	}
}
