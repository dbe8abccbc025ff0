// Package actor carries, in a request's context, who a request to package api acts for when
// another package of this module has already authenticated it: the partner portal and the
// operator console (package portal) sign their users in with a session of their own and then
// call the API in-process for them. Only this module's packages can put an Actor in a
// context (the package is internal), so a request from outside always goes through the API's
// own authentication.
package actor

import "context"

// Actor is who a request acts for: an operator (by the name of the token that signed in) or a
// tenant.
type Actor struct {
	// Operator is true for an operator: it sees and changes everything.
	Operator bool
	// Name is the operator token's name; for a tenant, how it signed in (e.g. "portal").
	Name string
	// Tenant is a tenant actor's tenant id; empty for an operator.
	Tenant string
}

type key struct{}

// With returns ctx carrying a.
func With(ctx context.Context, a Actor) context.Context { return context.WithValue(ctx, key{}, a) }

// From returns the Actor ctx carries, if any.
func From(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(key{}).(Actor)
	return a, ok
}
