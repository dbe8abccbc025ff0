package inbox

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cloudevents"
)

// Stats counts a Handler's answers (or a Processor's messages) since it was made. Processed and Duplicates count events
// (a batch adds each of its events to one or the other); the rest count requests.
type Stats struct {
	// Processed counts events applied and committed (200).
	Processed uint64
	// Duplicates counts deliveries of an event already committed, absorbed without running the
	// ProcessFunc (200; with X-Inbox-Duplicate: true when nothing in the request was new).
	Duplicates uint64
	// Failed counts requests whose ProcessFunc returned an error or panicked (500).
	Failed uint64
	// Unavailable counts requests that met a database error (503).
	Unavailable uint64
	// Rejected counts requests refused before the database: 400, 401, 403, 413 and 415.
	Rejected uint64
}

type counters struct {
	processed, duplicates, failed, unavailable, rejected atomic.Uint64
}

// Stats returns the counts so far. Each field is read atomically; together they are a
// near-instant snapshot, not a transactional one.
func (h *Handler) Stats() Stats { return h.p.stats.snapshot() }

func (c *counters) snapshot() Stats {
	return Stats{
		Processed:   c.processed.Load(),
		Duplicates:  c.duplicates.Load(),
		Failed:      c.failed.Load(),
		Unavailable: c.unavailable.Load(),
		Rejected:    c.rejected.Load(),
	}
}

// HeaderDuplicate is set to "true" on the 200 answer to an event the inbox had already
// committed, or to a batch whose events it had all committed already.
const HeaderDuplicate = "X-Inbox-Duplicate"

func (h *Handler) succeed(w http.ResponseWriter, ev Event, duplicate bool) {
	if duplicate {
		h.p.stats.duplicates.Add(1)
		w.Header().Set(HeaderDuplicate, "true")
		h.p.log.Debug().Str("event_id", ev.ID.String()).Int("attempt", ev.Attempt).Msg("inbox: duplicate absorbed")
		ok(w, "duplicate")
		return
	}
	h.p.stats.processed.Add(1)
	h.p.log.Debug().Str("event_id", ev.ID.String()).Str("event_type", ev.Type).Msg("inbox: event processed")
	ok(w, "processed")
}

// succeedBatch answers a committed batch: 200, with how many events were applied and how
// many skipped as already recorded.
func (h *Handler) succeedBatch(w http.ResponseWriter, evs []Event, applied []bool) {
	n := 0
	for _, a := range applied {
		if a {
			n++
		}
	}
	dups := len(evs) - n
	h.p.stats.processed.Add(uint64(n))
	h.p.stats.duplicates.Add(uint64(dups))
	if n == 0 {
		w.Header().Set(HeaderDuplicate, "true")
	}
	h.p.log.Debug().Int("events", len(evs)).Int("processed", n).Int("duplicates", dups).
		Str("first_event_id", evs[0].ID.String()).Msg("inbox: batch processed")
	ok(w, fmt.Sprintf("processed %d, duplicates %d", n, dups))
}

func ok(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, msg+"\n")
}

// refuse answers a request refused before the database, telling the sender which check
// failed and why (nothing in the message is secret; header values quoted in it are clipped).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	code := StatusCode(err)
	h.p.log.Warn().Err(err).Int("status", code).Str("remote", r.RemoteAddr).
		Str("event_id", clip(eventIDHeader(r.Header))).Msg("inbox: delivery refused")
	http.Error(w, err.Error(), code)
}

// eventIDHeader is the event id a refused request claims, for the log: X-Event-Id, else
// ce-id, else webhook-id (a batch's).
func eventIDHeader(h http.Header) string {
	for _, k := range []string{headerXEventID, cloudevents.HeaderID, headerWebhookID} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// fail answers a failure after verification: 500 for the ProcessFunc, 503 for the database,
// 400 for a payload PostgreSQL refuses. Nothing of the event was committed. A 5xx answer names
// only the class of failure: the detail, which may hold the consumer's data, goes to the log.
func (h *Handler) fail(w http.ResponseWriter, err error, eventID, eventType string, attempt, events int) {
	code := StatusCode(err)
	var e *zerolog.Event
	switch code {
	case http.StatusBadRequest:
		h.p.stats.rejected.Add(1)
		e = h.p.log.Warn()
	case http.StatusServiceUnavailable:
		h.p.stats.unavailable.Add(1)
		w.Header().Set("Retry-After", "5")
		e = h.p.log.Error()
	default:
		h.p.stats.failed.Add(1)
		e = h.p.log.Error()
	}
	var p *panicError
	if errors.As(err, &p) {
		e = e.Str("stack", string(p.stack))
	}
	if events > 1 {
		e = e.Int("events", events)
	}
	e.Err(err).Int("status", code).Str("event_id", eventID).Str("event_type", eventType).
		Int("attempt", attempt).Msg("inbox: delivery failed, rolled back")
	msg := err.Error()
	switch code {
	case http.StatusServiceUnavailable:
		msg = errDatabase.Error()
	case http.StatusInternalServerError:
		msg = errHandler.Error()
	}
	http.Error(w, msg, code)
}
