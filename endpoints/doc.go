// Package endpoints administers partner endpoints: the rows of outbox_endpoints that a pipeline
// run with endpoints fans its events out to. It is the one implementation of their rules, which
// the Go program of an application, `outbox-relay endpoint ...` and the HTTP API (package api)
// all call, so that an endpoint is checked, sealed and stored the same way whoever writes it.
//
// # A change is a transaction
//
// Every method takes the caller's querier (a pgx.Tx, *pgx.Conn, *pgxpool.Pool, or a *sql.Tx
// through SQL), so an endpoint is written in the same transaction as the rest of the
// application's change: a customer signs up, and their endpoint exists if and only if the
// signup commits. The relay reads each change from its slot, at the change's commit: events
// committed after it are routed by the new row, those before by the old one.
//
// # Usage
//
// A Store holds the settings: the schema of the relay's tables, the Sealer that seals secrets,
// the relay's metrics address for the URL guard. Its zero value works (the search_path's tables,
// secrets in clear):
//
//	eps := endpoints.Store{Schema: "app", Sealer: sealer}
//	ep, err := eps.Add(ctx, tx, endpoints.Endpoint{URL: "https://acme.example/hooks", TenantID: "acme"})
//	// ep.Secret is the generated secret, in clear, this once: hand it to the partner.
//
// Add, Update, Pause, Resume, Disable, Enable, RotateSecret and Remove write; Get and List read.
// DisableOnce is Disable that says whether the call disabled the endpoint, so that of several
// relays (or shards) disabling it at once only one reports it. Each checks its input first and refuses it with ErrInvalid and the reason (the reason the CLI
// prints and the API answers), writing nothing; a taken id is ErrExists and an unknown one
// ErrNotFound, without aborting the caller's transaction.
//
// # The event-type catalog
//
// When the catalog (package catalog, outbox_event_types) is not empty, Add and Update refuse an
// event-type pattern that matches no type in it with ErrInvalid, the nearest names ("did you mean
// order.created?") and an *UnknownPatternError that errors.As finds; a pattern that
// matches only deprecated types is accepted, with Endpoint.Warnings saying so. Update checks
// only the patterns it adds, so a type removed from the catalog later blocks no other change.
//
// # Egress
//
// An endpoint's URL is checked by the URL guard when it is written, and the relay checks every
// address it connects to: link-local, metadata and "this host" addresses always; loopback,
// private, CGNAT, multicast and reserved ones too for an endpoint with DenyPrivate (its URL came
// from a tenant: the API sets it) or under Store.Egress.DenyPrivate, unless Egress.Allow admits
// them. Give Store.Egress the relay's policy (relay.Config.Egress) so that both agree.
//
// # Secrets
//
// Secrets are generated when not given and returned once (Endpoint.Secret); reads describe them
// by a fingerprint only. With Store.Sealer set (NewSealer, with the relay's secrets key), every
// secret is sealed with AES-256-GCM before it reaches the database, so the table, its dumps, its
// replicas and the WAL hold no signing key in clear. RotateSecret keeps the old secrets signing
// beside the new one for a while, so a partner switches without losing a request.
//
// # Before this package
//
// These functions lived in package outbox (outbox.AddEndpoint, outbox.Endpoints, ...), which a
// producer imports for Enqueue; the relay and the CLI needed none of the rest of it. outbox
// keeps those names for one release as deprecated aliases and wrappers of this package.
package endpoints
