package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Errors of the endpoint functions; each is wrapped with the endpoint's id and the reason.
var (
	// ErrInvalidEndpoint is wrapped by every refusal of bad input, detected before anything
	// reaches the database: a malformed URL, an unknown scheme, a malformed secret, a pattern
	// that can never match. Nothing is written.
	ErrInvalidEndpoint = endpoint.ErrInvalid
	// ErrEndpointExists is returned by AddEndpoint when the id is taken. The statement uses ON
	// CONFLICT DO NOTHING, so the caller's transaction stays usable.
	ErrEndpointExists = errors.New("an endpoint with this id exists")
	// ErrEndpointNotFound is returned for an id that no endpoint has.
	ErrEndpointNotFound = errors.New("no endpoint has this id")
	// ErrEndpointState is returned for a change the endpoint's state does not allow: resuming
	// a disabled endpoint (enable it) or enabling a paused one (resume it).
	ErrEndpointState = errors.New("the endpoint's state does not allow this")
)

// EndpointState is an endpoint's state.
type EndpointState string

// The states of an endpoint. Only an enabled endpoint receives events; a paused one keeps
// them and receives them, in order, when resumed; a disabled one receives nothing until it is
// enabled.
const (
	EndpointEnabled  EndpointState = endpoint.Enabled
	EndpointPaused   EndpointState = endpoint.Paused
	EndpointDisabled EndpointState = endpoint.Disabled
)

// Endpoint is a partner's webhook: a row of outbox_endpoints. A pipeline run with endpoints
// delivers each event to every enabled endpoint whose subscription (TenantID, EventTypes,
// AggregateTypes) matches it, signed with the endpoint's secrets.
//
// The fields down to Metadata are written by AddEndpoint and UpdateEndpoint; the others are
// read only (set by the state functions, RotateEndpointSecret and the database).
type Endpoint struct {
	// ID names the endpoint: 1 to 63 of a-z, 0-9, '_', '.' and '-', starting with a letter or
	// digit. Empty on AddEndpoint: "ep_" and 16 random hex digits. It never changes.
	ID string
	// URL is the absolute http(s) URL the events are POSTed to. The URL guard refuses
	// link-local and metadata addresses and the relay's metrics address unless AllowPrivateURL.
	URL string
	// TenantID, if set, makes the endpoint receive only the events of this tenant
	// (Event.TenantID). Empty: every tenant's events, and events without a tenant.
	TenantID string
	// EventTypes are the patterns of the event types the endpoint receives: "order.created",
	// "order.*" (every type that starts with "order.") or "*". Empty on AddEndpoint: "*";
	// UpdateEndpoint refuses an empty list (it would not widen a subscription by accident).
	EventTypes []string
	// AggregateTypes, if set, limits the endpoint to events of these aggregate types. Empty:
	// every aggregate type.
	AggregateTypes []string
	// Scheme is how deliveries are signed: signature.XSignature (the zero value) or
	// signature.StandardWebhooks.
	Scheme signature.Scheme
	// Secret, on AddEndpoint and UpdateEndpoint, is the signing secret to store, in clear (it is
	// sealed when Endpoints.Sealer is set); empty on AddEndpoint: one is generated. In what the
	// functions return it is the secret just stored, in clear, for the caller to hand to the
	// partner once; GetEndpoint and ListEndpoints never fill it. It is left out of the JSON
	// encoding and of String, so logging an Endpoint does not log it.
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

	// State is the endpoint's state. On AddEndpoint it may be EndpointPaused, to register an
	// endpoint that receives its events only once resumed; empty is EndpointEnabled.
	State EndpointState
	// PausedReason and PausedAt say why and since when the endpoint is paused.
	PausedReason string
	PausedAt     time.Time
	// DisabledReason and DisabledAt say why and since when the endpoint is disabled.
	DisabledReason string
	DisabledAt     time.Time
	// Secrets describe the stored secrets, newest first, without their values.
	Secrets []EndpointSecret
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

// EndpointSecret describes one stored secret without revealing it.
type EndpointSecret struct {
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

// EndpointFilter selects the endpoints ListEndpoints returns.
type EndpointFilter struct {
	// TenantID, if set, selects the endpoints of this tenant.
	TenantID string
	// State, if set, selects the endpoints in this state.
	State EndpointState
	// After, if set, starts after this id: pass the last id of a page to get the next.
	After string
	// Limit is the most endpoints returned. 0: 100; at most 1000.
	Limit int
}

// RotateOptions tune RotateEndpointSecret.
type RotateOptions struct {
	// Secret is the new secret, in clear. Empty: one is generated.
	Secret string
	// KeepOld, if positive, keeps the current secrets signing alongside the new one for this
	// long (or until they expire, if sooner), so the partner can switch without a failed
	// delivery. 0: they stop at once.
	KeepOld time.Duration
}

// Endpoints holds what the endpoint functions need besides the querier. The zero value works:
// tables on the search_path, secrets stored in clear, no metrics address guarded. The
// package-level functions (AddEndpoint, ...) use it.
type Endpoints struct {
	// Schema is the schema of the relay's tables, as for Schema.Enqueue: Endpoints{Schema:
	// "app"} reads and writes app.outbox_endpoints whatever the search_path. Empty: as the
	// connection's search_path resolves outbox_endpoints.
	Schema Schema
	// Sealer, if set, seals every secret written (AES-256-GCM), so the table, its dumps and the
	// WAL hold no secret in clear; the relay needs the same key to sign. Nil: secrets are stored
	// in clear.
	Sealer *Sealer
	// RelayMetricsAddr is the relay's --metrics-addr (e.g. ":9187"): an endpoint URL at its port
	// on localhost, a loopback or unspecified address, or the address it binds is refused unless
	// AllowPrivateURL. Empty: not checked here (the relay still refuses to dial it).
	RelayMetricsAddr string
}

// AddEndpoint is Endpoints{}.Add: it stores a new endpoint, with its secret in clear.
func AddEndpoint(ctx context.Context, q Querier, ep Endpoint) (Endpoint, error) {
	return Endpoints{}.Add(ctx, q, ep)
}

// GetEndpoint is Endpoints{}.Get.
func GetEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return Endpoints{}.Get(ctx, q, id)
}

// ListEndpoints is Endpoints{}.List.
func ListEndpoints(ctx context.Context, q Querier, f EndpointFilter) ([]Endpoint, error) {
	return Endpoints{}.List(ctx, q, f)
}

// UpdateEndpoint is Endpoints{}.Update.
func UpdateEndpoint(ctx context.Context, q Querier, id string, change func(*Endpoint) error) (Endpoint, error) {
	return Endpoints{}.Update(ctx, q, id, change)
}

// PauseEndpoint is Endpoints{}.Pause.
func PauseEndpoint(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return Endpoints{}.Pause(ctx, q, id, reason)
}

// ResumeEndpoint is Endpoints{}.Resume.
func ResumeEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return Endpoints{}.Resume(ctx, q, id)
}

// DisableEndpoint is Endpoints{}.Disable.
func DisableEndpoint(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return Endpoints{}.Disable(ctx, q, id, reason)
}

// EnableEndpoint is Endpoints{}.Enable.
func EnableEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return Endpoints{}.Enable(ctx, q, id)
}

// RotateEndpointSecret is Endpoints{}.RotateSecret: the new secret is stored in clear.
func RotateEndpointSecret(ctx context.Context, q Querier, id string, opts RotateOptions) (Endpoint, error) {
	return Endpoints{}.RotateSecret(ctx, q, id, opts)
}

// RemoveEndpoint is Endpoints{}.Remove.
func RemoveEndpoint(ctx context.Context, q Querier, id string) error {
	return Endpoints{}.Remove(ctx, q, id)
}
