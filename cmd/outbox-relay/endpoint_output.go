package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// endpointJSON is an endpoint in --json output: the table's column names, the secrets as
// fingerprints. Secret is present only in the output of add, update and rotate-secret, when
// they generated one.
type endpointJSON struct {
	ID              string          `json:"id"`
	URL             string          `json:"url"`
	TenantID        *string         `json:"tenant_id"`
	EventTypes      []string        `json:"event_types"`
	AggregateTypes  []string        `json:"aggregate_types"`
	Scheme          string          `json:"scheme"`
	Format          string          `json:"format"`
	BatchMaxEvents  int             `json:"batch_max_events"`
	BatchMaxBytes   int             `json:"batch_max_bytes"`
	BatchLingerMS   int64           `json:"batch_linger_ms"`
	RateLimit       int             `json:"rate_limit"`
	MaxInFlight     int             `json:"max_in_flight"`
	SpillAfterMS    int64           `json:"spill_after_ms"`
	AllowPrivateURL bool            `json:"allow_private_url"`
	DenyPrivate     bool            `json:"deny_private"`
	EgressProxy     *string         `json:"egress_proxy"`
	Warnings        []string        `json:"warnings,omitempty"`
	Metadata        json.RawMessage `json:"metadata"`
	Description     string          `json:"description"`
	State           string          `json:"state"`
	PausedReason    string          `json:"paused_reason,omitempty"`
	PausedAt        *time.Time      `json:"paused_at,omitempty"`
	DisabledReason  string          `json:"disabled_reason,omitempty"`
	DisabledAt      *time.Time      `json:"disabled_at,omitempty"`
	Secrets         []secretJSON    `json:"secrets"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	Secret          string          `json:"secret,omitempty"`
}

type secretJSON struct {
	Fingerprint string     `json:"fingerprint"`
	Sealed      bool       `json:"sealed"`
	KeyID       string     `json:"key_id,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
}

func toJSON(e endpoints.Endpoint) endpointJSON {
	j := endpointJSON{
		ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, AggregateTypes: e.AggregateTypes, Scheme: e.Scheme.String(),
		Format: e.Format, BatchMaxEvents: e.BatchMaxEvents, BatchMaxBytes: e.BatchMaxBytes,
		BatchLingerMS: e.BatchLinger.Milliseconds(), RateLimit: e.RateLimit, MaxInFlight: e.MaxInFlight,
		SpillAfterMS:    e.SpillAfter.Milliseconds(),
		AllowPrivateURL: e.AllowPrivateURL, Metadata: e.Metadata, Description: e.Description, State: string(e.State), PausedReason: e.PausedReason,
		PausedAt: timePtr(e.PausedAt), DisabledReason: e.DisabledReason, DisabledAt: timePtr(e.DisabledAt),
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, Secret: e.Secret, Secrets: []secretJSON{},
	}
	if e.TenantID != "" {
		j.TenantID = &e.TenantID
	}
	if e.EgressProxy != "" {
		j.EgressProxy = &e.EgressProxy
	}
	j.DenyPrivate, j.Warnings = e.DenyPrivate, e.Warnings
	for _, s := range e.Secrets {
		j.Secrets = append(j.Secrets, secretJSON{Fingerprint: s.Fingerprint, Sealed: s.KeyID != "", KeyID: s.KeyID,
			CreatedAt: timePtr(s.CreatedAt), ExpiresAt: timePtr(s.ExpiresAt)})
	}
	return j
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func wantJSON(cmd *cobra.Command) bool {
	v, _ := cmd.Flags().GetBool("json")
	return v
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printWritten prints the endpoint an add, update or rotate-secret wrote, and its new secret
// when one was generated.
func printWritten(cmd *cobra.Command, verb string, e endpoints.Endpoint) error {
	w := cmd.OutOrStdout()
	if wantJSON(cmd) {
		return printJSON(w, toJSON(e))
	}
	fmt.Fprintf(w, "%s endpoint %s (%s): %s\n", verb, e.ID, e.State, e.URL)
	fmt.Fprintf(w, "  %s\n", subscription(e))
	printSecret(w, e)
	return nil
}

func printSecret(w io.Writer, e endpoints.Endpoint) {
	if e.Secret == "" {
		return
	}
	fmt.Fprintf(w, "secret (%s, fingerprint %s), shown only this once: give it to the partner now\n  %s\n",
		e.Scheme, e.Secrets[0].Fingerprint, e.Secret)
}

// subscription says in one line what the endpoint receives.
func subscription(e endpoints.Endpoint) string {
	tenant := "every tenant's events"
	if e.TenantID != "" {
		tenant = "tenant " + e.TenantID
	}
	aggregates := "every aggregate type"
	if len(e.AggregateTypes) > 0 {
		aggregates = "aggregate types " + strings.Join(e.AggregateTypes, ", ")
	}
	return fmt.Sprintf("%s; event types %s; %s; signed %s", tenant, strings.Join(e.EventTypes, ", "), aggregates, e.Scheme)
}

// printEndpoint prints one endpoint, field by field (show).
func printEndpoint(w io.Writer, e endpoints.Endpoint) {
	line := func(k, v string) { fmt.Fprintf(w, "%-16s %s\n", k+":", v) }
	line("id", e.ID)
	line("url", e.URL)
	if e.Description != "" {
		line("description", e.Description)
	}
	state := string(e.State)
	switch e.State {
	case endpoints.Paused:
		state += fmt.Sprintf(" since %s (%s)", clock(e.PausedAt), e.PausedReason)
	case endpoints.Disabled:
		state += fmt.Sprintf(" since %s (%s)", clock(e.DisabledAt), e.DisabledReason)
	}
	line("state", state)
	line("tenant", or(e.TenantID, "(none: every tenant's events)"))
	line("event types", strings.Join(e.EventTypes, ", "))
	line("aggregate types", or(strings.Join(e.AggregateTypes, ", "), "(every type)"))
	line("scheme", e.Scheme.String())
	line("format", e.Format)
	line("batch", fmt.Sprintf("%d events, %d bytes, linger %s", e.BatchMaxEvents, e.BatchMaxBytes, e.BatchLinger))
	line("rate limit", limit(e.RateLimit, "/s", "none"))
	line("max in flight", limit(e.MaxInFlight, "", fmt.Sprintf("%d (the default; the pipeline's --max-in-flight is the pool "+
		"all its endpoints share)", settings.EndpointMaxInFlight)))
	if e.SpillAfter > 0 {
		line("spill after", e.SpillAfter.String())
	} else {
		line("spill after", fmt.Sprintf("the pipeline's --spill-after (%s unless set)", settings.EndpointSpillAfter))
	}
	if e.AllowPrivateURL {
		line("url guard", "off for this endpoint (--allow-private-url)")
	}
	if e.DenyPrivate {
		line("url guard", "public addresses only: the URL came from a tenant (--deny-private)")
	}
	if e.EgressProxy != "" {
		line("egress proxy", e.EgressProxy)
	}
	for i, s := range e.Secrets {
		line(fmt.Sprintf("secret #%d", i+1), describeSecret(s))
	}
	if len(e.Metadata) > 0 && string(e.Metadata) != "{}" {
		line("metadata", string(e.Metadata))
	}
	line("created", clock(e.CreatedAt))
	line("updated", clock(e.UpdatedAt))
}

func describeSecret(s endpoints.Secret) string {
	d := "fingerprint " + or(s.Fingerprint, "(unknown)")
	if s.KeyID != "" {
		d += ", sealed with key " + s.KeyID
	} else {
		d += ", in clear"
	}
	if !s.ExpiresAt.IsZero() {
		d += ", stops signing at " + clock(s.ExpiresAt)
	}
	return d
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func limit(n int, unit, none string) string {
	if n == 0 {
		return none
	}
	return fmt.Sprintf("%d%s", n, unit)
}
