// Package endpoint is what the relay and its tools know about a partner endpoint: a row of
// outbox_endpoints (Row), the rules every row obeys (Validate: the table's CHECK constraints and
// what SQL cannot check), the event-type patterns of a subscription (ParsePattern, Match), the
// secrets it signs with (GenerateSecret, Fingerprint, Row.Keys, sealed at rest by package
// seal), and the URL guard (Guard: CheckURL when an endpoint is written, Control at each
// connection).
//
// # Who uses it
//
// Package endpoints writes rows with it (endpoints.Store.Add and friends, in the application's
// transaction; `outbox-relay endpoint` and the HTTP API through it), and the relay reads rows
// from its slot with SetColumn, checks them with Validate, routes events with Subscribed or an
// index built on ParsePattern, signs with Row.Keys and dials through Guard.Control. Nothing here
// does I/O.
//
// # Subscriptions
//
// An event goes to an enabled endpoint when its tenant matches (an endpoint without a tenant
// takes every tenant's events; an event without a tenant goes only to endpoints without one),
// one of the endpoint's event-type patterns matches its type, and its aggregate type is listed
// when the endpoint lists any. A pattern is an event type ("order.created"), a prefix
// ("order.*": every type starting with "order." and longer than it) or "*". Patterns that could
// never match ("", "order.", "*.created", "a**") are refused.
//
// # The URL guard
//
// Each endpoint has an Access (Guard.AccessOf): AccessDefault refuses link-local and metadata
// addresses, "this host" and the relay's metrics address; AccessPublic, for an endpoint with
// deny_private (its URL came from a tenant) or every endpoint under Egress.DenyPrivate, refuses
// loopback, private, CGNAT, multicast and reserved addresses too, and those carried inside IPv6
// addresses, unless Egress.Allow admits them; AccessAny (allow_private_url) refuses nothing.
// CheckURL reads literal addresses the way a resolver does (0x7f.1, 2130706433) without any
// lookup; Control checks the address a name resolved to at each connection, which is what stops
// DNS rebinding. Egress.HTTPSOnly refuses http:// for every endpoint.
package endpoint
