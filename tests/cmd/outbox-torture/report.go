package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// examples is how many items of a failed check the summary lists.
const examples = 5

// writeSummary prints the run as a Markdown table, then the details of anything that failed.
func writeSummary(w io.Writer, r *result) {
	c, v := r.Config, r.Verdict
	fmt.Fprintf(w, "## outbox-relay torture run\n\n")
	fmt.Fprintf(w, "TORTURE_SEED=%d TORTURE_EVENTS=%d TORTURE_DURATION=%s: %d writers over %d aggregates, "+
		"transactions of 1–%d events, %.0f%% rolled back; a fault every %s–%s.\n\n",
		r.Seed, c.Events, c.Duration, c.Writers, c.Aggregates, c.MaxTxSize, 100*c.Rollback, c.GapMin, c.GapMax)
	if c.Endpoints {
		fmt.Fprintf(w, "TORTURE_ENDPOINTS=1: `run --endpoints` fanning out to %d endpoints over %d tenants, changed every %s–%s "+
			"(add, update of event_types and aggregate_types, pause, resume, disable, enable, remove); checked per "+
			"(event, endpoint) pair against the endpoint's state at the event's commit.\n\n",
			c.EndpointCount, c.Tenants, c.ChangeMin, c.ChangeMax)
	}
	fmt.Fprintln(w, "| Check | Value | Verdict |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	row := func(name, value string, ok *bool) {
		verdict := ""
		if ok != nil {
			verdict = "ok"
			if !*ok {
				verdict = "**FAIL**"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", name, value, verdict)
	}
	is := func(b bool) *bool { return &b }
	committed := v.Committed
	if r.Endpoints != nil {
		committed = r.Endpoints.Committed
	}
	row("events committed", fmt.Sprintf("%d in %d transactions", committed, r.CommittedTxs), nil)
	row("rolled back", fmt.Sprintf("%d events in %d transactions", r.RolledBackEvents, r.RolledBackTxs), nil)
	row("cut off by faults, retried", fmt.Sprintf("%d events in %d transactions; %d COMMIT outcomes settled by look-up",
		r.AbortedEvents, r.AbortedTxs, r.Settled), nil)
	faults := faultCounts(r)
	if r.Config.Sink != "" {
		faults += fmt.Sprintf("; sink %s: each recv-* fault was a broker restart for its hold (broker.go)", r.Config.Sink)
	}
	if r.Config.Batch > 1 {
		faults += fmt.Sprintf("; batches of up to %d events", r.Config.Batch)
	}
	row("faults", faults, nil)
	row("receiver answers", receiverAnswers(r), nil)
	if r.Endpoints != nil {
		endpointRows(row, r)
	} else {
		defaultRows(row, r)
	}
	row("bad signatures", fmt.Sprint(r.BadSignatures), is(r.BadSignatures == 0))
	row("takeovers", takeovers(r), is(len(r.Faults.Failures) == 0))
	row("relay crashes, unclean shutdowns", fmt.Sprintf("%d, %d (of %d relays started)", len(r.Crashes),
		len(r.Shutdown), r.RelaysStarted), is(len(r.Crashes)+len(r.Shutdown) == 0))
	caught := "not checked (not drained)"
	if r.Drained {
		caught = fmt.Sprintf("%s after the last delivery", r.CaughtUp.Round(time.Millisecond))
		if !r.CaughtUpOK {
			caught = fmt.Sprintf("not within %s", catchUpLimit)
		}
	}
	row("slot caught up", caught, is(r.CaughtUpOK))
	if s := r.Second; s != nil {
		row("second pipeline ("+secondFilter+")", fmt.Sprintf("%d of %d delivered, %d lost, %d phantoms (rows its filter refuses "+
			"included), %d order violations, %d duplicates", s.Delivered, s.Expected, len(s.Lost), len(s.Phantoms),
			len(s.Order), s.Duplicates), is(s.ok()))
	}
	row("time", fmt.Sprintf("%s (load %s, drain %s)", r.Total.Round(100*time.Millisecond),
		r.Load.Round(100*time.Millisecond), r.Drain.Round(100*time.Millisecond)), nil)
	row("seed", fmt.Sprint(r.Seed), nil)
	result := "**PASS**"
	if !r.OK() {
		result = "**FAIL**"
	}
	row("result", result, nil)
	writeDetails(w, r)
}

// defaultRows are the checks of a run without endpoints.
func defaultRows(row func(string, string, *bool), r *result) {
	v := r.Verdict
	is := func(b bool) *bool { return &b }
	phantoms := len(v.PhantomsRolledBack) + len(v.PhantomsAborted) + len(v.PhantomsUnknown)
	row("lost", fmt.Sprint(len(v.Lost)), is(len(v.Lost) == 0 && r.Drained))
	row("phantoms", fmt.Sprintf("%d (rolled back %d, cut off %d, never written %d)", phantoms,
		len(v.PhantomsRolledBack), len(v.PhantomsAborted), len(v.PhantomsUnknown)), is(phantoms == 0))
	row("order violations", fmt.Sprint(len(v.OrderViolations)), is(len(v.OrderViolations) == 0))
	inbox := len(v.NotApplied) + len(v.ForeignApplied) + len(v.InboxMismatch)
	row("inbox double-applies", fmt.Sprintf("%d; applied rows %d, inbox_events rows %d, committed %d (mismatches %d)",
		len(v.DoubleApplied), v.AppliedRows, v.InboxRows, v.Committed, inbox),
		is(len(v.DoubleApplied)+inbox == 0))
	row("confirm violations", fmt.Sprintf("%d over %d samples (by commit LSN from X-Event-Sequence: %d); "+
		"the slot moved back %d times", len(v.ConfirmViolations), v.Samples, len(v.ConfirmSeqViolations), v.Backward),
		is(len(v.ConfirmViolations)+len(v.ConfirmSeqViolations) == 0))
	row("X-Event-Sequence and payload consistency", fmt.Sprintf("%d errors", len(v.SequenceErrors)),
		is(len(v.SequenceErrors) == 0))
	dups := fmt.Sprintf("%d (%.2f%%) acknowledged twice; %d reached the inbox again (%.2f%%)", v.Duplicates,
		pct(v.Duplicates, v.Committed), r.InboxDups, pct(int(r.InboxDups), v.Committed))
	if len(r.DupSources) > 0 {
		dups += "; most after: " + strings.Join(r.DupSources, ", ")
	}
	row("duplicates", dups, nil)
}

// endpointRows are the checks of an endpoints run, over (event, endpoint) pairs.
func endpointRows(row func(string, string, *bool), r *result) {
	v, c := r.Endpoints, r.Changes
	is := func(b bool) *bool { return &b }
	changes := make([]string, 0, len(epOps))
	for _, op := range epOps {
		changes = append(changes, fmt.Sprintf("%s %d", op, c.Committed[op]))
	}
	row("endpoint changes", fmt.Sprintf("%d endpoints over %d tenants at the start, %d created in all; committed: %s; "+
		"%d not committed (retried or dropped), %d COMMIT outcomes settled by look-up", r.Config.EndpointCount,
		r.Config.Tenants, v.Endpoints, strings.Join(changes, ", "), c.NotCommitted, c.Settled), is(len(c.Failures) == 0))
	row("backlog", fmt.Sprintf("%d endpoint blackouts (%d requests answered 503); the relays logged %d spills to a "+
		"backlog and %d catch-ups (spill after %s); %d removals drawn among blacked-out endpoints (events queued)",
		r.Blackouts, r.BlackedOut, r.Spills, r.Rejoins, r.Config.SpillAfter, c.RemovedQueued), nil)
	row("410 Gone", fmt.Sprintf("%d endpoints disabled by the relay after answering 410 (%d requests), then enabled "+
		"with `endpoint enable`; %d pairs uncertain (committed while the relay's disable was under way)",
		c.Gone, r.GoneAnswers, v.Uncertain), nil)
	var why []string
	for _, w := range whys {
		why = append(why, fmt.Sprintf("%s %d", w, v.NotRouted[w]))
	}
	row("(event, endpoint) pairs at commit", fmt.Sprintf("%d required (%d of them routed while paused), %d optional "+
		"(a later removal may drop them); not routed: %s", v.Required, v.Paused, v.Optional,
		strings.Join(why, ", ")), nil)
	row("lost", fmt.Sprintf("%d of %d required pairs; %d of %d optional delivered (%d after the removal); "+
		"%d routed while paused delivered after the resume", len(v.Lost), v.Required, v.OptionalDelivered, v.Optional,
		v.LateOptional, v.PausedDelivered),
		is(len(v.Lost) == 0 && r.Drained))
	settled := "not checked (not drained)"
	if r.Drained {
		settled = fmt.Sprintf("%d rows left pending once drained (-1: unread); %d more pending after a kill (advisory marks)",
			r.Pending, r.PendingAfterKill)
	}
	row("outbox_events settled", settled, is(r.Pending == 0 && r.Drained))
	phantoms := len(v.PhantomsRolledBack) + len(v.PhantomsAborted) + len(v.PhantomsUnknown)
	row("phantoms", fmt.Sprintf("%d (rolled back %d, cut off %d, never written %d); %d to an endpoint never created, "+
		"%d requests to no endpoint's path", phantoms, len(v.PhantomsRolledBack), len(v.PhantomsAborted),
		len(v.PhantomsUnknown), len(v.UnknownEndpoint), r.UnknownRequests),
		is(phantoms+len(v.UnknownEndpoint) == 0 && r.UnknownRequests == 0))
	row("deliveries outside rule 4", fmt.Sprintf("%d not routed at commit, %d routed while paused delivered before "+
		"the resume", len(v.Outside), len(v.WhilePaused)), is(len(v.Outside)+len(v.WhilePaused) == 0))
	row("order violations", fmt.Sprintf("%d per (endpoint, aggregate)", len(v.OrderViolations)), is(len(v.OrderViolations) == 0))
	row("confirm violations", fmt.Sprintf("%d over %d samples (by commit LSN from X-Event-Sequence: %d); "+
		"the slot moved back %d times", len(v.ConfirmViolations), v.Samples, len(v.ConfirmSeqViolations), v.Backward),
		is(len(v.ConfirmViolations)+len(v.ConfirmSeqViolations) == 0))
	row("X-Event-Sequence and payload consistency", fmt.Sprintf("%d errors", len(v.SequenceErrors)),
		is(len(v.SequenceErrors) == 0))
	row("commit order of changes and transactions", fmt.Sprintf("%d contradictions between their clock_timestamp() and "+
		"their commit LSNs", len(v.OrderingErrors)), is(len(v.OrderingErrors) == 0))
	delivered := v.Delivered + v.OptionalDelivered
	dups := fmt.Sprintf("%d (%.2f%%) pairs acknowledged again", v.Duplicates, pct(v.Duplicates, delivered))
	if len(r.DupSources) > 0 {
		dups += "; most after: " + strings.Join(r.DupSources, ", ")
	}
	row("duplicates", dups, nil)
	if len(v.PerEndpoint) > 0 {
		row("duplicates per endpoint", v.dupsByEndpoint(8), nil)
	}
}

func faultCounts(r *result) string {
	parts := make([]string, 0, faultKinds)
	total := 0
	for k := faultKind(0); k < faultKinds; k++ {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Faults.Counts[k]))
		total += r.Faults.Counts[k]
	}
	if len(r.Faults.PGDown) > 0 {
		parts[faultPGRestart] += fmt.Sprintf(" (down at most %s)", maxDuration(r.Faults.PGDown).Round(10*time.Millisecond))
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

func receiverAnswers(r *result) string {
	names := [modeCount]string{"normal", "500", "hung", "reset", "applied then reset", "slow"}
	if r.Endpoints != nil {
		names[modeDropAck] = "read then reset" // no inbox in an endpoints run
	}
	parts := []string{fmt.Sprintf("%d requests", r.Requests)}
	for m := mode500; m < modeCount; m++ {
		parts = append(parts, fmt.Sprintf("%s %d", names[m], r.Faulted[m]))
	}
	if r.Endpoints == nil {
		parts = append(parts, fmt.Sprintf("inbox refused %d", r.InboxRefusals))
	}
	return strings.Join(parts, ", ")
}

func takeovers(r *result) string {
	s := fmt.Sprintf("%d failovers, max %s; %d relay kills, back in at most %s", len(r.Faults.Takeovers),
		maxDuration(r.Faults.Takeovers).Round(10*time.Millisecond), len(r.Faults.Recovery),
		maxDuration(r.Faults.Recovery).Round(10*time.Millisecond))
	if n := len(r.Faults.Noticed); n > 0 {
		s += fmt.Sprintf("; %d partitions, noticed within %s, streaming within %s of the thaw", n,
			maxDuration(r.Faults.Noticed).Round(10*time.Millisecond), maxDuration(r.Faults.Healed).Round(10*time.Millisecond))
	}
	if n := len(r.Faults.SlotDrops); n > 0 {
		s += fmt.Sprintf("; %d slot drops, streaming on a new slot in at most %s", n,
			maxDuration(r.Faults.SlotDrops).Round(10*time.Millisecond))
	}
	if n := len(r.Faults.Replays); n > 0 {
		var events int64
		for _, e := range r.Faults.Replays {
			events += e
		}
		s += fmt.Sprintf("; %d replays since a time re-sent %d events", n, events)
	}
	if n := len(r.Faults.Failures); n > 0 {
		s += fmt.Sprintf("; %d did not heal", n)
	}
	return s
}

// writeDetails lists a few examples of each failure.
func writeDetails(w io.Writer, r *result) {
	v := r.Verdict
	type list struct {
		name  string
		items []string
	}
	var eps []list
	if e := r.Endpoints; e != nil {
		eps = []list{{"lost (endpoint event)", e.Lost}, {"phantoms from rolled-back transactions", e.PhantomsRolledBack},
			{"phantoms from transactions cut off by a fault", e.PhantomsAborted}, {"phantoms never written", e.PhantomsUnknown},
			{"deliveries to an endpoint never created", e.UnknownEndpoint}, {"deliveries not routed at commit", e.Outside},
			{"deliveries while paused", e.WhilePaused}, {"order violations", e.OrderViolations},
			{"confirm violations", e.ConfirmViolations}, {"confirm violations by commit LSN", e.ConfirmSeqViolations},
			{"X-Event-Sequence and payload errors", e.SequenceErrors}, {"ordering (clock method against the WAL)", e.OrderingErrors},
			{"endpoint manager failures", r.Changes.Failures}, {"rows of outbox_events left pending", pendingWhats(r.PendingRows)}}
	}
	lists := []list{
		{"lost", v.Lost},
		{"phantoms from rolled-back transactions", v.PhantomsRolledBack},
		{"phantoms from transactions cut off by a fault", v.PhantomsAborted},
		{"phantoms never written", v.PhantomsUnknown},
		{"order violations", v.OrderViolations},
		{"inbox double-applies", v.DoubleApplied},
		{"committed but never applied", v.NotApplied},
		{"applied but never committed", v.ForeignApplied},
		{"inbox_events mismatches", v.InboxMismatch},
		{"confirm violations", v.ConfirmViolations},
		{"confirm violations by commit LSN", v.ConfirmSeqViolations},
		{"X-Event-Sequence and payload errors", v.SequenceErrors},
		{"faults that did not heal", r.Faults.Failures},
		{"relay crashes", r.Crashes},
		{"unclean shutdowns", r.Shutdown},
		{"writer errors", r.WriterErrors},
	}
	for _, l := range append(eps, lists...) {
		if len(l.items) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n", l.name, len(l.items))
		for _, it := range l.items[:min(len(l.items), examples)] {
			fmt.Fprintf(w, "- %s\n", it)
		}
	}
	if !r.OK() {
		fmt.Fprintf(w, "\nReproduce the schedule with TORTURE_SEED=%d TORTURE_EVENTS=%d TORTURE_DURATION=%s; logs in %s "+
			"(relay-<n>.log per relay process, postgres.log)\n", r.Seed, r.Config.Events, r.Config.Duration, r.LogDir)
		if r.Endpoints != nil {
			fmt.Fprintf(w, "Failures, timeline and every delivery: %s; interleaving around each violation: %s\n",
				filepath.Join(r.LogDir, "endpoints.txt"), r.Evidence)
		}
	}
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func maxDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

func pendingWhats(rows []pendingRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.What
	}
	return out
}
