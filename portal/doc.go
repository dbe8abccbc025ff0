// Package portal is the partner portal and the operator console: web pages, rendered on the
// server from templates embedded in the binary, that are a client of the management API
// (package api). A tenant's customer sees and manages its own webhook endpoints (state, the
// last hour's success rate, every delivery and attempt with its answer, resend, recover, test,
// rotate the secret); an operator sees every tenant's.
//
// # Serving it
//
// New returns an http.Handler serving Config.Prefix+"/portal/" and Config.Prefix+"/console/".
// `outbox-relay api` and `outbox-relay run --api-addr` serve it beside the API; an application
// mounts it in its own server:
//
//	a, _ := api.New(api.Config{Pool: pool, SigningKeys: keys, OperatorTokens: tokens})
//	p, _ := portal.New(portal.Config{API: a, Pool: pool, SigningKeys: keys})
//	mux.Handle("/api/v1/", a)
//	mux.Handle("/portal/", p)
//	mux.Handle("/console/", p)
//
// # A client of the API
//
// Every read and every change of an endpoint is a request to the API's handler, in-process,
// for the signed-in tenant or operator: the same routes, rules, refusals (shown beside the
// field they name, in the API's words), audit records and metrics as a request over HTTP.
// The pages add no rule of their own. The console's list of every endpoint, sortable by state,
// undelivered and oldest undelivered, and its pipelines page read the database directly, for
// operators only: the API has no sorted overview, and the slots are what `outbox-relay status`
// reads.
//
// # Signing in
//
// A customer signs in with a portal link (Link, or `outbox-relay portal-link`): a token signed
// with the keys of tenant tokens, with its own audience, so an API token is no link and a link
// no API token. Opening it, once and before it expires, records a session (a row of
// outbox_portal_sessions holding the SHA-256 of a random cookie value) and redirects to an
// address without the token. The cookie is HttpOnly, SameSite=Lax, Secure over TLS; the session
// lasts Config.SessionTTL and a sign-out ends it. An operator signs in to the console by posting
// an operator token of the API once, in a form.
//
// # Security
//
// Every answer carries a Content-Security-Policy that allows the pages' own script, style
// sheet and icon only (no inline script or style), forms posted to the pages only, and framing
// by Config.FrameAncestors only. Every POST carries a CSRF token derived from the session's
// cookie value and checked in constant time. A tenant's session reaches only what the API lets
// a tenant token reach: another tenant's endpoint, event or request is not found.
package portal
