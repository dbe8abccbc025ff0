package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Errors of the Store's methods; each is wrapped with the endpoint's id and the reason.
var (
	// ErrInvalid is wrapped by every refusal of bad input, detected before anything reaches the
	// database: a malformed URL, an unknown scheme, a malformed secret, a pattern that can never
	// match. Nothing is written.
	ErrInvalid = endpoint.ErrInvalid
	// ErrExists is returned by Add when the id is taken. The statement uses ON CONFLICT DO
	// NOTHING, so the caller's transaction stays usable.
	ErrExists = errors.New("an endpoint with this id exists")
	// ErrNotFound is returned for an id that no endpoint has.
	ErrNotFound = errors.New("no endpoint has this id")
	// ErrState is returned for a change the endpoint's state does not allow: resuming a
	// disabled endpoint (enable it) or enabling a paused one (resume it).
	ErrState = errors.New("the endpoint's state does not allow this")
)

// State is an endpoint's state.
type State string

// The states of an endpoint. Only an enabled endpoint receives events; a paused one keeps
// them and receives them, in order, when resumed; a disabled one receives nothing until it is
// enabled.
const (
	Enabled  State = endpoint.Enabled
	Paused   State = endpoint.Paused
	Disabled State = endpoint.Disabled
)

// Endpoint is a partner's webhook: a row of outbox_endpoints. A pipeline run with endpoints
// delivers each event to every enabled endpoint whose subscription (TenantID, EventTypes,
// AggregateTypes) matches it, signed with the endpoint's secrets.
//
// The fields down to Metadata are written by Store.Add and Store.Update; the others are read
// only (set by the state methods, Store.RotateSecret and the database).
type Endpoint struct {
	// ID names the endpoint: 1 to 63 of a-z, 0-9, '_', '.' and '-', starting with a letter or
	// digit. Empty on Add: "ep_" and 16 random hex digits. It never changes.
	ID string
	// URL is the absolute http(s) URL the events are POSTed to. The URL guard refuses
	// link-local and metadata addresses and the relay's metrics address unless AllowPrivateURL.
	URL string
	// TenantID, if set, makes the endpoint receive only the events of this tenant
	// (outbox.Event.TenantID). Empty: every tenant's events, and events without a tenant.
	TenantID string
	// EventTypes are the patterns of the event types the endpoint receives: "order.created",
	// "order.*" (every type that starts with "order.") or "*". Empty on Add: "*"; Update
	// refuses an empty list (it would not widen a subscription by accident).
	EventTypes []string
	// AggregateTypes, if set, limits the endpoint to events of these aggregate types. Empty:
	// every aggregate type.
	AggregateTypes []string
	// Scheme is how deliveries are signed: signature.XSignature (the zero value) or
	// signature.StandardWebhooks.
	Scheme signature.Scheme
	// Secret, on Add and Update, is the signing secret to store, in clear (it is sealed when
	// Store.Sealer is set); empty on Add: one is generated. In what the methods return it is the
	// secret just stored, in clear, for the caller to hand to the partner once; Get and List
	// never fill it. It is left out of the JSON encoding and of String, so logging an Endpoint
	// does not log it.
	Secret string `json:"-"`
	// Format of one-event requests: "raw" (the zero value) or "cloudevents". Batches are
	// CloudEvents batches.
	Format string
	// BatchMaxEvents is the most events in one request. 0 or 1: one event per request.
	BatchMaxEvents int
	// BatchMaxBytes bounds the summed payload sizes of a batch. 0: 1 MiB.
	BatchMaxBytes int
	// BatchLinger is how long a batch that is not full waits for more events, in whole
	// milliseconds up to a minute. 0: it is sent at once.
	BatchLinger time.Duration
	// RateLimit, if positive, is the most requests the endpoint sees in any one second. 0: no
	// limit.
	RateLimit int
	// MaxInFlight, if positive, caps the endpoint's concurrent requests. 0: 16 (the endpoints
	// of a pipeline share its workers, max(--max-in-flight, 256)).
	MaxInFlight int
	// SpillAfter, if positive, is how long the endpoint's oldest undelivered event waits before
	// its events go to its backlog off the WAL (whole milliseconds, 100ms to 7 days). 0: the
	// pipeline's --spill-after (30s).
	SpillAfter time.Duration
	// AllowPrivateURL lets the URL reach what the URL guard refuses (link-local and metadata
	// addresses, the relay's metrics address), when it is written and at every connection.
	AllowPrivateURL bool
	// Metadata is the application's own JSON object about the endpoint (the relay does not read
	// it). Empty: {}.
	Metadata json.RawMessage
	// DenyPrivate marks an endpoint whose URL a tenant gave (the API sets it on every endpoint a
	// tenant creates or changes): loopback, private, CGNAT, link-local, unspecified and metadata
	// addresses are refused for it when it is written and at every connection, whatever the
	// relay's --egress-deny-private, unless --egress-allow admits them; AllowPrivateURL cannot
	// be set with it. False: an operator's endpoint, under Store.Egress and the relay's policy.
	DenyPrivate bool
	// EgressProxy is the outbound proxy of this endpoint's connections: http://host:port (no
	// credentials: those belong in the relay's --egress-proxy), or "direct" for none. Empty:
	// the relay's --egress-proxy.
	EgressProxy string
	// Description says what the endpoint is, for people (the CLI and the API show it; the relay
	// does not read it): text of at most 1024 bytes. Empty: none.
	Description string
	// Warnings, in what Add and Update return, are what was accepted but deserves a look: an
	// event-type pattern that matches only deprecated types of the catalog, naming their
	// replacements. Never stored.
	Warnings []string `json:"-"`

	// State is the endpoint's state. On Add it may be Paused, to register an endpoint that
	// receives its events only once resumed; empty is Enabled.
	State State
	// PausedReason and PausedAt say why and since when the endpoint is paused.
	PausedReason string
	PausedAt     time.Time
	// DisabledReason and DisabledAt say why and since when the endpoint is disabled.
	DisabledReason string
	DisabledAt     time.Time
	// Secrets describe the stored secrets, newest first, without their values.
	Secrets []Secret
	// CreatedAt and UpdatedAt are the database's times of the insert and the last change.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// String describes the endpoint in one line, without its secret: fmt's %v and %+v print this.
func (e Endpoint) String() string {
	tenant := e.TenantID
	if tenant == "" {
		tenant = "every tenant"
	}
	return fmt.Sprintf("endpoint %s (%s, %s) %s %v", e.ID, e.State, tenant, e.URL, e.EventTypes)
}

// Secret describes one stored secret without revealing it.
type Secret struct {
	// Fingerprint is the first 8 hex digits of the secret's SHA-256, which the partner can
	// compute from the secret they hold (printf %s "$SECRET" | sha256sum | cut -c1-8). Empty
	// when the row was written without one (plain SQL) and the secret is sealed.
	Fingerprint string
	// KeyID names the secrets key that sealed it; empty when it is stored in clear.
	KeyID string
	// CreatedAt is when it was stored; zero when unknown.
	CreatedAt time.Time
	// ExpiresAt is when it stops signing (a rotation that kept it); zero: never.
	ExpiresAt time.Time
}

// Filter selects the endpoints List returns.
type Filter struct {
	// TenantID, if set, selects the endpoints of this tenant.
	TenantID string
	// State, if set, selects the endpoints in this state.
	State State
	// After, if set, starts after this id: pass the last id of a page to get the next.
	After string
	// Limit is the most endpoints returned. 0: 100; at most 1000.
	Limit int
}

// RotateOptions tune Store.RotateSecret.
type RotateOptions struct {
	// Secret is the new secret, in clear. Empty: one is generated.
	Secret string
	// KeepOld, if positive, keeps the current secrets signing alongside the new one for this
	// long (or until they expire, if sooner), so the partner can switch without a failed
	// delivery. 0: they stop at once.
	KeepOld time.Duration
}

// Store holds what the endpoint methods need besides the querier. The zero value works: tables
// on the search_path, secrets stored in clear, no metrics address guarded.
type Store struct {
	// Schema is the PostgreSQL schema of the relay's tables: Store{Schema: "app"} reads and
	// writes app.outbox_endpoints whatever the search_path (as outbox.Schema("app") does for
	// Enqueue). Empty: as the connection's search_path resolves outbox_endpoints.
	Schema string
	// Sealer, if set, seals every secret written (AES-256-GCM), so the table, its dumps and the
	// WAL hold no secret in clear; the relay needs the same key to sign. Nil: secrets are stored
	// in clear.
	Sealer *Sealer
	// RelayMetricsAddr is the relay's --metrics-addr (e.g. ":9187"): an endpoint URL at its port
	// on localhost, a loopback or unspecified address, or the address it binds is refused unless
	// AllowPrivateURL. Empty: not checked here (the relay still refuses to dial it).
	RelayMetricsAddr string
	// Egress is the relay's egress policy (--egress-deny-private, --egress-allow,
	// --egress-https-only), so that a URL the relay would refuse to reach is refused when it is
	// written. The zero value: no policy beyond the guard's own rules and DenyPrivate.
	Egress Egress
}

// Egress is the egress policy for partner endpoints, which the relay applies at every
// connection and Store.Egress when a URL is written: give both the same (the CLI reads both
// from the same flags and environment variables). The zero value adds nothing.
type Egress struct {
	// DenyPrivate refuses loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), CGNAT
	// (100.64/10), multicast and reserved addresses for every endpoint, as for those with
	// Endpoint.DenyPrivate, except endpoints with AllowPrivateURL (an operator's exception).
	// False: only for endpoints with DenyPrivate.
	DenyPrivate bool
	// Allow are ranges admitted though DenyPrivate refuses them (internal partners). They never
	// admit link-local or metadata addresses, "this host" or the relay's metrics address.
	// Empty: none.
	Allow []netip.Prefix
	// HTTPSOnly refuses http:// URLs for every endpoint. False: http and https.
	HTTPSOnly bool
}
