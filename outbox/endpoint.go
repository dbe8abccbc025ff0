package outbox

import (
	"context"

	"github.com/outbox-relay/outbox-relay/endpoints"
)

// The endpoint functions moved to package endpoints; these names stay for one release and
// delegate to it. Each is deprecated and names its replacement.

// Errors of the endpoint functions: the same values as package endpoints', so errors.Is
// matches either name.
var (
	// Deprecated: use endpoints.ErrInvalid.
	ErrInvalidEndpoint = endpoints.ErrInvalid
	// Deprecated: use endpoints.ErrExists.
	ErrEndpointExists = endpoints.ErrExists
	// Deprecated: use endpoints.ErrNotFound.
	ErrEndpointNotFound = endpoints.ErrNotFound
	// Deprecated: use endpoints.ErrState.
	ErrEndpointState = endpoints.ErrState
)

// EndpointState is an endpoint's state.
//
// Deprecated: use endpoints.State.
type EndpointState = endpoints.State

// The states of an endpoint.
//
// Deprecated: use endpoints.Enabled, endpoints.Paused and endpoints.Disabled.
const (
	EndpointEnabled  = endpoints.Enabled
	EndpointPaused   = endpoints.Paused
	EndpointDisabled = endpoints.Disabled
)

// Endpoint is a partner's webhook.
//
// Deprecated: use endpoints.Endpoint.
type Endpoint = endpoints.Endpoint

// EndpointSecret describes one stored secret.
//
// Deprecated: use endpoints.Secret.
type EndpointSecret = endpoints.Secret

// EndpointFilter selects the endpoints ListEndpoints returns.
//
// Deprecated: use endpoints.Filter.
type EndpointFilter = endpoints.Filter

// RotateOptions tune RotateEndpointSecret.
//
// Deprecated: use endpoints.RotateOptions.
type RotateOptions = endpoints.RotateOptions

// Sealer seals endpoint secrets at rest.
//
// Deprecated: use endpoints.Sealer.
type Sealer = endpoints.Sealer

// NewSealer reads the secrets keys.
//
// Deprecated: use endpoints.NewSealer.
func NewSealer(keys string) (*Sealer, error) { return endpoints.NewSealer(keys) }

// Endpoints holds what the endpoint functions need besides the querier: each method is
// endpoints.Store's, with Schema as the store's.
//
// Deprecated: use endpoints.Store (its Schema is a string: endpoints.Store{Schema: "app"}).
type Endpoints struct {
	Schema           Schema
	Sealer           *Sealer
	RelayMetricsAddr string
}

func (e Endpoints) store() endpoints.Store {
	return endpoints.Store{Schema: string(e.Schema), Sealer: e.Sealer, RelayMetricsAddr: e.RelayMetricsAddr}
}

// Add is endpoints.Store.Add.
//
// Deprecated: use endpoints.Store.Add.
func (e Endpoints) Add(ctx context.Context, q Querier, ep Endpoint) (Endpoint, error) {
	return e.store().Add(ctx, q, ep)
}

// Validate is endpoints.Store.Validate.
//
// Deprecated: use endpoints.Store.Validate.
func (e Endpoints) Validate(ep Endpoint) error { return e.store().Validate(ep) }

// Get is endpoints.Store.Get.
//
// Deprecated: use endpoints.Store.Get.
func (e Endpoints) Get(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return e.store().Get(ctx, q, id)
}

// List is endpoints.Store.List.
//
// Deprecated: use endpoints.Store.List.
func (e Endpoints) List(ctx context.Context, q Querier, f EndpointFilter) ([]Endpoint, error) {
	return e.store().List(ctx, q, f)
}

// Update is endpoints.Store.Update.
//
// Deprecated: use endpoints.Store.Update.
func (e Endpoints) Update(ctx context.Context, q Querier, id string, change func(*Endpoint) error) (Endpoint, error) {
	return e.store().Update(ctx, q, id, change)
}

// Pause is endpoints.Store.Pause.
//
// Deprecated: use endpoints.Store.Pause.
func (e Endpoints) Pause(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return e.store().Pause(ctx, q, id, reason)
}

// Resume is endpoints.Store.Resume.
//
// Deprecated: use endpoints.Store.Resume.
func (e Endpoints) Resume(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return e.store().Resume(ctx, q, id)
}

// Disable is endpoints.Store.Disable.
//
// Deprecated: use endpoints.Store.Disable.
func (e Endpoints) Disable(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return e.store().Disable(ctx, q, id, reason)
}

// Enable is endpoints.Store.Enable.
//
// Deprecated: use endpoints.Store.Enable.
func (e Endpoints) Enable(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return e.store().Enable(ctx, q, id)
}

// RotateSecret is endpoints.Store.RotateSecret.
//
// Deprecated: use endpoints.Store.RotateSecret.
func (e Endpoints) RotateSecret(ctx context.Context, q Querier, id string, opts RotateOptions) (Endpoint, error) {
	return e.store().RotateSecret(ctx, q, id, opts)
}

// Remove is endpoints.Store.Remove.
//
// Deprecated: use endpoints.Store.Remove.
func (e Endpoints) Remove(ctx context.Context, q Querier, id string) error {
	return e.store().Remove(ctx, q, id)
}

// Reseal is endpoints.Store.Reseal.
//
// Deprecated: use endpoints.Store.Reseal.
func (e Endpoints) Reseal(ctx context.Context, q Querier, id string) (bool, error) {
	return e.store().Reseal(ctx, q, id)
}

// AddEndpoint is endpoints.Store{}.Add: it stores a new endpoint, with its secret in clear.
//
// Deprecated: use endpoints.Store.Add.
func AddEndpoint(ctx context.Context, q Querier, ep Endpoint) (Endpoint, error) {
	return endpoints.Store{}.Add(ctx, q, ep)
}

// GetEndpoint is endpoints.Store{}.Get.
//
// Deprecated: use endpoints.Store.Get.
func GetEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return endpoints.Store{}.Get(ctx, q, id)
}

// ListEndpoints is endpoints.Store{}.List.
//
// Deprecated: use endpoints.Store.List.
func ListEndpoints(ctx context.Context, q Querier, f EndpointFilter) ([]Endpoint, error) {
	return endpoints.Store{}.List(ctx, q, f)
}

// UpdateEndpoint is endpoints.Store{}.Update.
//
// Deprecated: use endpoints.Store.Update.
func UpdateEndpoint(ctx context.Context, q Querier, id string, change func(*Endpoint) error) (Endpoint, error) {
	return endpoints.Store{}.Update(ctx, q, id, change)
}

// PauseEndpoint is endpoints.Store{}.Pause.
//
// Deprecated: use endpoints.Store.Pause.
func PauseEndpoint(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return endpoints.Store{}.Pause(ctx, q, id, reason)
}

// ResumeEndpoint is endpoints.Store{}.Resume.
//
// Deprecated: use endpoints.Store.Resume.
func ResumeEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return endpoints.Store{}.Resume(ctx, q, id)
}

// DisableEndpoint is endpoints.Store{}.Disable.
//
// Deprecated: use endpoints.Store.Disable.
func DisableEndpoint(ctx context.Context, q Querier, id, reason string) (Endpoint, error) {
	return endpoints.Store{}.Disable(ctx, q, id, reason)
}

// EnableEndpoint is endpoints.Store{}.Enable.
//
// Deprecated: use endpoints.Store.Enable.
func EnableEndpoint(ctx context.Context, q Querier, id string) (Endpoint, error) {
	return endpoints.Store{}.Enable(ctx, q, id)
}

// RotateEndpointSecret is endpoints.Store{}.RotateSecret: the new secret is stored in clear.
//
// Deprecated: use endpoints.Store.RotateSecret.
func RotateEndpointSecret(ctx context.Context, q Querier, id string, opts RotateOptions) (Endpoint, error) {
	return endpoints.Store{}.RotateSecret(ctx, q, id, opts)
}

// RemoveEndpoint is endpoints.Store{}.Remove.
//
// Deprecated: use endpoints.Store.Remove.
func RemoveEndpoint(ctx context.Context, q Querier, id string) error {
	return endpoints.Store{}.Remove(ctx, q, id)
}
