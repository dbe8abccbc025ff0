package endpoint

import (
	"encoding/json"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// States of an endpoint.
const (
	Enabled  = "enabled"
	Paused   = "paused"
	Disabled = "disabled"
)

// Formats of an endpoint's requests, as the pipeline's --format.
const (
	FormatRaw         = "raw"
	FormatCloudEvents = "cloudevents"
)

// Defaults the table gives a column that an INSERT leaves out.
const (
	DefaultBatchMaxEvents = settings.BatchMaxEvents
	DefaultBatchMaxBytes  = settings.BatchMaxBytes
	DefaultBatchLingerMS  = int(settings.BatchLinger / time.Millisecond)
)

// Row is one row of outbox_endpoints, column for column (the JSON names are the column names,
// so `SELECT to_jsonb(e) FROM outbox_endpoints e` decodes into it; SetColumn decodes the text
// values of a replication tuple). A NULL column is the field's zero value.
type Row struct {
	ID              string          `json:"id"`
	URL             string          `json:"url"`
	Secrets         []Secret        `json:"secrets"`
	Scheme          string          `json:"scheme"`
	Format          string          `json:"format"`
	BatchMaxEvents  int             `json:"batch_max_events"`
	BatchMaxBytes   int             `json:"batch_max_bytes"`
	BatchLingerMS   int             `json:"batch_linger_ms"`
	TenantID        string          `json:"tenant_id"`       // "": NULL, every tenant
	EventTypes      []string        `json:"event_types"`     // patterns, see ParsePattern
	AggregateTypes  []string        `json:"aggregate_types"` // nil: NULL, every aggregate type
	RateLimit       int             `json:"rate_limit"`      // 0: NULL, no limit
	MaxInFlight     int             `json:"max_in_flight"`   // 0: NULL, the pipeline's
	State           string          `json:"state"`
	PausedReason    string          `json:"paused_reason"`
	PausedAt        time.Time       `json:"paused_at"`
	DisabledReason  string          `json:"disabled_reason"`
	DisabledAt      time.Time       `json:"disabled_at"`
	AllowPrivateURL bool            `json:"allow_private_url"`
	Metadata        json.RawMessage `json:"metadata"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	SpillAfterMS    int             `json:"spill_after_ms"` // 0: NULL, the pipeline's spill_after
	DenyPrivate     bool            `json:"deny_private"`   // the URL came from a tenant: AccessPublic
	EgressProxy     string          `json:"egress_proxy"`   // "": NULL, the relay's --egress-proxy; "direct": none
	Description     string          `json:"description"`    // "": NULL, none
}

// Secret is one element of the secrets column.
type Secret struct {
	// Value is the signing secret in clear, or sealed (package seal) for the endpoint's id.
	Value string `json:"secret"`
	// Fingerprint is Fingerprint of the clear secret; empty when the row was written without one.
	Fingerprint string `json:"fingerprint,omitempty"`
	// CreatedAt is when the secret was stored; nil when unknown (plain SQL).
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// ExpiresAt, if set, is when the secret stops signing (a rotation's --keep-old).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Active reports whether the secret still signs at now.
func (s Secret) Active(now time.Time) bool { return s.ExpiresAt == nil || now.Before(*s.ExpiresAt) }

// SignatureScheme returns the row's scheme; an unknown one is XSignature (Validate refuses it).
func (r *Row) SignatureScheme() signature.Scheme {
	s, _ := signature.ParseScheme(r.Scheme)
	return s
}

// Linger is the row's batch linger.
func (r *Row) Linger() time.Duration { return time.Duration(r.BatchLingerMS) * time.Millisecond }

// Subscribed reports whether an event of this tenant ("" for none), event type and aggregate
// type is in the endpoint's subscription: the tenant matches (an endpoint without a tenant
// takes every tenant's events; an event without one goes only to endpoints without one), a
// pattern matches, and the aggregate type is listed when the endpoint lists any. It ignores the
// state. It does not allocate.
func (r *Row) Subscribed(tenant, eventType, aggregateType string) bool {
	if r.TenantID != "" && r.TenantID != tenant {
		return false
	}
	if !MatchAny(r.EventTypes, eventType) {
		return false
	}
	if r.AggregateTypes == nil {
		return true
	}
	for _, a := range r.AggregateTypes {
		if a == aggregateType {
			return true
		}
	}
	return false
}
