package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// The reports of `outbox-relay deliveries`, whose JSON field names are stable.

// eventDeliveries is `deliveries --event`.
type eventDeliveries struct {
	EventID   string          `json:"event_id"`
	Endpoints []eventEndpoint `json:"endpoints"`
}

// eventEndpoint is what happened to the event at one endpoint (of one pipeline).
type eventEndpoint struct {
	Pipeline  string           `json:"pipeline"`
	Endpoint  string           `json:"endpoint"`
	Failed    []attemptEntry   `json:"failed_attempts"`
	Delivered *deliveredEntry  `json:"delivered"` // null: not (yet) delivered, or not recorded
	Backlog   *backlogEntryOut `json:"backlog"`   // null: not in the endpoint's backlog
}

type attemptEntry struct {
	At        time.Time `json:"at"`
	Attempt   int       `json:"attempt"`
	Status    int       `json:"status"` // 0: no HTTP answer
	LatencyMS int       `json:"latency_ms"`
	Error     string    `json:"error"`
}

type deliveredEntry struct {
	At        time.Time `json:"at"`
	Attempt   int       `json:"attempt"`
	LatencyMS int       `json:"latency_ms"`
}

type backlogEntryOut struct {
	SpilledAt time.Time `json:"spilled_at"`
	Attempts  int       `json:"attempts"` // made before it was spilled
}

func eventReport(id string, recs []state.DeliveryRecord, backlog []state.EventBacklog) eventDeliveries {
	rep := eventDeliveries{EventID: id, Endpoints: []eventEndpoint{}}
	at := map[[2]string]int{}
	get := func(pipeline, ep string) *eventEndpoint {
		k := [2]string{pipeline, ep}
		i, ok := at[k]
		if !ok {
			i = len(rep.Endpoints)
			at[k] = i
			rep.Endpoints = append(rep.Endpoints, eventEndpoint{Pipeline: pipeline, Endpoint: ep, Failed: []attemptEntry{}})
		}
		return &rep.Endpoints[i]
	}
	for _, r := range recs {
		e := get(r.Pipeline, r.Endpoint)
		if r.Delivered {
			if e.Delivered == nil || r.At.After(e.Delivered.At) { // a replay delivers it again: the last
				e.Delivered = &deliveredEntry{At: r.At, Attempt: r.Attempt, LatencyMS: r.LatencyMS}
			}
			continue
		}
		e.Failed = append(e.Failed, attemptEntry{At: r.At, Attempt: r.Attempt, Status: r.Status, LatencyMS: r.LatencyMS, Error: r.Error})
	}
	for _, b := range backlog {
		get(b.Pipeline, b.Endpoint).Backlog = &backlogEntryOut{SpilledAt: b.SpilledAt, Attempts: b.Attempts}
	}
	return rep
}

func writeEventReport(w io.Writer, rep eventDeliveries) error {
	fmt.Fprintf(w, "event %s\n", rep.EventID)
	for _, e := range rep.Endpoints {
		fmt.Fprintf(w, "\nendpoint %s (pipeline %s): ", e.Endpoint, e.Pipeline)
		switch {
		case e.Delivered != nil:
			fmt.Fprintf(w, "delivered at %s on attempt %d (%dms)\n", e.Delivered.At.Format(time.RFC3339Nano), e.Delivered.Attempt, e.Delivered.LatencyMS)
		case e.Backlog != nil:
			fmt.Fprintf(w, "waiting in its backlog since %s (%d attempts before)\n", e.Backlog.SpilledAt.Format(time.RFC3339), e.Backlog.Attempts)
		default:
			fmt.Fprintln(w, "not delivered yet (or its delivery is not recorded)")
		}
		if len(e.Failed) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  FAILED AT\tATTEMPT\tSTATUS\tLATENCY\tERROR")
			for _, a := range e.Failed {
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%dms\t%s\n", a.At.Format(time.RFC3339Nano), a.Attempt, statusText(a.Status), a.LatencyMS, oneLine(a.Error, maxErrorShown))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// endpointDeliveries is `deliveries --endpoint`.
type endpointDeliveries struct {
	Endpoint string         `json:"endpoint"`
	Entries  []historyEntry `json:"entries"`
	// NextUntil, when the page is full, is the --until that shows the next (older) page.
	NextUntil *time.Time `json:"next_until,omitempty"`
}

type historyEntry struct {
	Pipeline  string    `json:"pipeline"`
	EventID   string    `json:"event_id"`
	At        time.Time `json:"at"`
	Attempt   int       `json:"attempt"`
	Delivered bool      `json:"delivered"`
	Status    int       `json:"status"` // a failed attempt's; 0: no HTTP answer (always 0 for a delivery)
	LatencyMS int       `json:"latency_ms"`
	Error     string    `json:"error"`
}

func historyReport(q state.EndpointHistoryQuery, recs []state.DeliveryRecord) endpointDeliveries {
	rep := endpointDeliveries{Endpoint: q.Endpoint, Entries: make([]historyEntry, 0, len(recs))}
	for _, r := range recs {
		rep.Entries = append(rep.Entries, historyEntry{Pipeline: r.Pipeline, EventID: r.EventID, At: r.At, Attempt: r.Attempt,
			Delivered: r.Delivered, Status: r.Status, LatencyMS: r.LatencyMS, Error: r.Error})
	}
	if len(recs) == q.Limit && len(recs) > 0 {
		// Entries at the same instant as the last may straddle the pages: the next starts at it.
		next := recs[len(recs)-1].At
		rep.NextUntil = &next
	}
	return rep
}

func writeHistoryReport(w io.Writer, rep endpointDeliveries) error {
	if len(rep.Entries) == 0 {
		_, err := fmt.Fprintf(w, "endpoint %s: no entries in that time\n", rep.Endpoint)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tPIPELINE\tEVENT\tATTEMPT\tRESULT\tLATENCY\tERROR")
	for _, e := range rep.Entries {
		result := "delivered"
		if !e.Delivered {
			result = "failed " + statusText(e.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%dms\t%s\n", e.At.Format(time.RFC3339Nano), e.Pipeline, e.EventID, e.Attempt, result,
			e.LatencyMS, oneLine(e.Error, maxErrorShown))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.NextUntil != nil {
		_, err := fmt.Fprintf(w, "more: add --until %s for the next page\n", rep.NextUntil.Format(time.RFC3339Nano))
		return err
	}
	return nil
}

// maxErrorShown is how much of an error (which may end with an answer's first KB) a table row shows;
// --json has all of it.
const maxErrorShown = 200

func statusText(status int) string {
	if status == 0 {
		return "(no answer)"
	}
	return fmt.Sprintf("HTTP %d", status)
}
