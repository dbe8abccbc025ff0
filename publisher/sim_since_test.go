package publisher

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/store"
)

// The simulation's replays --since: the operator's `replay --since` (one destination) and an
// endpoint's recover (`replay --since --endpoint`, the API's recover), and what is checked of
// them. A recover may name any endpoint, paused or disabled too (a disabled one ignores it).

// simSince is a replay --since request committed in the log.
type simSince struct {
	id       int64
	endpoint string // "": the one destination
	commit   pglogrepl.LSN
	at       int // its index among the transaction's events
}

// recoverEndpoint asks for the events of the last 1 to 5 seconds again, for one endpoint.
func (w *world) recoverEndpoint() *cdc.Control {
	ids := w.eps.ids()
	if len(ids) == 0 {
		return nil
	}
	lane := simPipeline + "/" + ids[w.rng.IntN(len(ids))]
	since := w.now.Add(-time.Duration(1+w.rng.IntN(5)) * time.Second)
	id := w.db.RequestSince(store.SinceState{Pipeline: lane, Since: since, Total: 1})
	return &cdc.Control{Replay: &cdc.ReplayRequest{Pipeline: lane, SinceRequest: id}}
}

// noteSince records the replay --since requests of a committed transaction.
func (w *world) noteSince(tx *walTx) {
	for _, c := range tx.controls {
		if r := c.Replay; r != nil && r.SinceRequest != 0 {
			ep, _ := strings.CutPrefix(r.Pipeline, simPipeline+"/")
			if ep == simPipeline {
				ep = ""
			}
			w.sinces = append(w.sinces, simSince{id: r.SinceRequest, endpoint: ep, commit: tx.commit, at: c.At})
		}
	}
}

// checkIsolated checks, after each input of p, that its intake does not wait for the deliveries
// of a replay --since to an endpoint: it goes through the endpoint's backlog while the intake
// goes on (the other lanes take the stream, and the slot confirms past the request once its rows
// are written).
func (w *world) checkIsolated(p *proc) {
	if w.eps != nil && p.e.sinceLeft > 0 && len(w.fails) == 0 {
		w.failf("isolation: p%d's intake waits for %d events of a replay --since to be delivered, which holds every "+
			"other endpoint and the slot", p.id, p.e.sinceLeft)
	}
}

// recoveredAfter reports whether endpoint ep was recovered (replay --since) after ev's commit:
// ev may then reach it although it was not routed to it at its commit.
func (w *world) recoveredAfter(ep string, ev *eventInfo) bool {
	pos := w.position(ev)
	for _, s := range w.sinces {
		if s.endpoint == ep && s.commit >= pos.LSN {
			return true
		}
	}
	return false
}

// checkResent checks a re-send of a replay --since: to an endpoint, only events of its tenant.
func (w *world) checkResent(d delivery, ev *eventInfo) {
	if w.eps == nil {
		return
	}
	for _, c := range w.eps.history {
		if c.id == d.endpoint && c.row != nil {
			if c.row.TenantID != "" && c.row.TenantID != ev.m.TenantID {
				w.failf("outside: a replay --since re-sent event %s of tenant %q to %q, of tenant %q", d.id, ev.m.TenantID,
					d.endpoint, c.row.TenantID)
			}
			return
		}
	}
	w.failf("outside: a replay --since re-sent event %s to %q, which never existed", d.id, d.endpoint)
}

// checkSincesDone checks that every replay --since a relay took is complete at the end: taken
// unless its endpoint was disabled or gone at its place, and not dropped by a removal later.
func (w *world) checkSincesDone() {
	for _, s := range w.sinces {
		if s.endpoint != "" {
			row := w.stateAt(s.endpoint, &eventInfo{tx: &walTx{commit: s.commit}, idx: s.at})
			if row == nil || row.State == endpoint.Disabled || w.eps.rows[s.endpoint] == nil {
				continue
			}
		}
		st, err := w.db.Pipeline(laneName(s.endpoint), w.eps != nil).SinceState(context.Background(), s.id)
		if err != nil || !st.Done {
			w.failf("stranded: replay --since %d of %q (at %s) is not complete at the end (sent %d, err %v)", s.id, s.endpoint,
				s.commit, st.Sent, err)
		}
	}
}
