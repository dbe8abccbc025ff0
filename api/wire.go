package api

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
)

// Endpoint is an endpoint as the API shows it: the table's column names, as the CLI's --json
// prints them; secrets as fingerprints. Secret is present only in the answer of a create, a
// rotate-secret, and an update that stored a new secret: the secret in clear, this once.
type Endpoint struct {
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
	Metadata        json.RawMessage `json:"metadata"`
	Description     string          `json:"description"`
	State           string          `json:"state"`
	PausedReason    *string         `json:"paused_reason"`
	PausedAt        *time.Time      `json:"paused_at"`
	DisabledReason  *string         `json:"disabled_reason"`
	DisabledAt      *time.Time      `json:"disabled_at"`
	Secrets         []Secret        `json:"secrets"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	Secret          string          `json:"secret,omitempty"`
	Warnings        []string        `json:"warnings,omitempty"`
}

// Secret describes one stored secret without revealing it.
type Secret struct {
	Fingerprint string     `json:"fingerprint"`
	Sealed      bool       `json:"sealed"`
	KeyID       string     `json:"key_id,omitempty"`
	CreatedAt   *time.Time `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
}

// endpointFields are the fields a create takes; an update takes them but id and state.
var endpointFields = []string{"id", "url", "tenant_id", "event_types", "aggregate_types", "scheme", "secret", "format",
	"batch_max_events", "batch_max_bytes", "batch_linger_ms", "rate_limit", "max_in_flight", "spill_after_ms", "metadata",
	"description", "allow_private_url", "deny_private", "egress_proxy", "state"}

func wireEndpoint(e endpoints.Endpoint) Endpoint {
	j := Endpoint{
		ID: e.ID, URL: e.URL, TenantID: optional(e.TenantID), EventTypes: e.EventTypes, AggregateTypes: e.AggregateTypes,
		Scheme: e.Scheme.String(), Format: e.Format, BatchMaxEvents: e.BatchMaxEvents, BatchMaxBytes: e.BatchMaxBytes,
		BatchLingerMS: e.BatchLinger.Milliseconds(), RateLimit: e.RateLimit, MaxInFlight: e.MaxInFlight,
		SpillAfterMS: e.SpillAfter.Milliseconds(), AllowPrivateURL: e.AllowPrivateURL, DenyPrivate: e.DenyPrivate,
		EgressProxy: optional(e.EgressProxy), Metadata: e.Metadata, Description: e.Description, State: string(e.State),
		PausedReason: optional(e.PausedReason), PausedAt: optionalTime(e.PausedAt), DisabledReason: optional(e.DisabledReason),
		DisabledAt: optionalTime(e.DisabledAt), CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt, Secret: e.Secret,
		Secrets: []Secret{}, Warnings: e.Warnings,
	}
	if j.EventTypes == nil {
		j.EventTypes = []string{}
	}
	if len(j.Metadata) == 0 {
		j.Metadata = json.RawMessage(`{}`)
	}
	for _, s := range e.Secrets {
		j.Secrets = append(j.Secrets, Secret{Fingerprint: s.Fingerprint, Sealed: s.KeyID != "", KeyID: s.KeyID,
			CreatedAt: optionalTime(s.CreatedAt), ExpiresAt: optionalTime(s.ExpiresAt)})
	}
	return j
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Page is a page of a listing: Data, and NextCursor to pass as cursor for the next page (null
// on the last page).
type Page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

func page[T any](data []T, next string) Page[T] {
	if data == nil {
		data = []T{}
	}
	p := Page[T]{Data: data}
	if next != "" {
		p.NextCursor = &next
	}
	return p
}

// reason is what an error of package endpoints says, without the package's prefix and the
// operation the caller already knows: the words the CLI prints.
func reason(err error) string {
	s := strings.TrimPrefix(err.Error(), "endpoints: ")
	return s
}
