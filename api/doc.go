// Package api is the management API of partner endpoints: JSON over HTTP under /api/v1, for an
// application's backend, its operators and (through tenant tokens) its customers. It is a
// client of the same rules as `outbox-relay endpoint` and package endpoints: one implementation
// of validation, sealing, the URL guard and the event-type catalog.
//
// # Serving it
//
// New returns an http.Handler. `outbox-relay api --addr :8080` serves it as a process of its own
// (stateless: every request is one transaction on the database, so any number of them can
// stand behind a load balancer), `outbox-relay run --api-addr ADDR` beside a relay, and an
// application mounts it in its own server with its own pool:
//
//	h, err := api.New(api.Config{Pool: pool, SigningKeys: keys, OperatorTokens: tokens})
//	mux.Handle("/api/v1/", h)
//
// A change through the API is a transaction on outbox_endpoints like any other: the relay
// applies it at its commit, in the stream's order.
//
// # Who may do what
//
// Every request carries Authorization: Bearer TOKEN (GET /api/v1/openapi.json aside).
//
//   - An operator token (Config.OperatorTokens; ParseOperatorTokens reads the file) sees and
//     changes everything. Tokens are compared in constant time.
//   - A tenant token is minted by the application for one of its customers (Keys.Mint, or
//     `outbox-relay api-token --tenant acme --ttl 1h`): an HS256 JWT with the tenant, an
//     expiry and an audience, signed by the first of Config.SigningKeys. It sees and changes
//     only its tenant's endpoints and their deliveries: another tenant's endpoint, event or
//     request answers 404, never 403. It cannot set tenant_id, lift the URL guard
//     (allow_private_url), set an egress proxy, or change the event-type catalog; the
//     endpoints it writes are marked deny_private, so private addresses are refused for them
//     when written and at every connection.
//   - Config.TenantResolver lets an application that authenticates its users itself decide
//     the tenant from its own session, with the same scoping, without minting tokens.
//
// An expired, tampered or unknown token answers 401 and says nothing else. Each change writes
// an audit record (GET /api/v1/audit) in the change's transaction.
//
// # Errors
//
// Every error is application/problem+json (RFC 9457, Problem): a stable type
// (urn:outbox-relay:problem:...), a title, a detail naming the fix in the words the CLI uses
// for the same refusal, and the fields at fault. Bodies larger than Config.MaxBodyBytes,
// unknown fields and wrong types are refused, never ignored. A create with an Idempotency-Key
// answers a retried request with the first answer instead of making a second endpoint.
//
// # The document
//
// GET /api/v1/openapi.json (OpenAPI) is the OpenAPI 3.1 description of every route, and the
// source of the reference pages (docs/reference/api.md, an index, and docs/reference/api/: a
// page per tag and one of the schemas).
package api
