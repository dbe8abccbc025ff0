package api

import (
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Stats is the answer of GET /api/v1/endpoints/{id}/stats: the endpoint's state, what the
// relays delivering to it last reported, and its log's last hour.
type Stats struct {
	EndpointID string `json:"endpoint_id"`
	State      string `json:"state"`
	// Reason and Since are why and since when it is paused or disabled; null when enabled.
	Reason *string    `json:"reason"`
	Since  *time.Time `json:"since"`
	// Undelivered counts the events its lanes hold undelivered (its backlog included);
	// OldestUndeliveredAt is the oldest one's commit time and OldestUndeliveredAgeSeconds its
	// age now.
	Undelivered                 int64      `json:"undelivered"`
	OldestUndeliveredAt         *time.Time `json:"oldest_undelivered_at"`
	OldestUndeliveredAgeSeconds *float64   `json:"oldest_undelivered_age_seconds"`
	// Backlog counts the events waiting in its backlog table, off the WAL.
	Backlog       int64      `json:"backlog"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	LastError     *string    `json:"last_error"`
	LastErrorAt   *time.Time `json:"last_error_at"`
	FailuresInRow int        `json:"failures_in_row"`
	FailingSince  *time.Time `json:"failing_since"`
	// ReportedAt is when a relay last reported on it; null: none has (no relay runs with
	// endpoints, or none has delivered to it yet).
	ReportedAt *time.Time `json:"reported_at"`
	LastHour   HourCounts `json:"last_hour"`
}

// HourCounts are the deliveries and failed attempts of the last hour, from the delivery log.
type HourCounts struct {
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
}

func (a *API) endpointStats(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	if err := unknownParams(r); err != nil {
		return err
	}
	e, err := a.store.Get(r.Context(), a.cfg.Pool, id)
	if err != nil {
		return storeError(err, id)
	}
	if !p.sees(e.TenantID) {
		return notFound(id)
	}
	now := time.Now()
	st, err := state.ReadEndpointStats(r.Context(), a.cfg.Pool, a.cfg.Schema, id, now.Add(-time.Hour))
	if err != nil {
		return err
	}
	out := Stats{EndpointID: id, State: string(e.State), Undelivered: st.Undelivered, OldestUndeliveredAt: optionalTime(st.OldestUndelivered),
		Backlog: st.Backlog, LastSuccessAt: optionalTime(st.LastSuccess), LastError: optional(st.LastError),
		LastErrorAt: optionalTime(st.LastErrorAt), FailuresInRow: st.FailuresInRow, FailingSince: optionalTime(st.FailingSince),
		ReportedAt: optionalTime(st.Reported), LastHour: HourCounts{Succeeded: st.Succeeded, Failed: st.Failed}}
	switch {
	case !e.PausedAt.IsZero():
		out.Reason, out.Since = optional(e.PausedReason), optionalTime(e.PausedAt)
	case !e.DisabledAt.IsZero():
		out.Reason, out.Since = optional(e.DisabledReason), optionalTime(e.DisabledAt)
	}
	if !st.OldestUndelivered.IsZero() && st.Undelivered > 0 {
		age := max(now.Sub(st.OldestUndelivered), 0).Seconds()
		out.OldestUndeliveredAgeSeconds = &age
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
