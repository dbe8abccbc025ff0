// Package catalog is the event-type catalog: the event types an application emits, one row of
// outbox_event_types each (a name, a description, a JSON Schema of the payload, an example
// payload, whether it is deprecated and what replaces it), so that partners can see what
// exists and a subscription to a type that does not exist is refused instead of silently
// receiving nothing.
//
// # Managing it
//
// The table is written by SQL, by `outbox-relay event-types sync FILE.yaml` (a file kept beside
// the application's code: ParseFile reads it, Catalog.Sync applies it), by the HTTP API, and by
// the functions here, each taking the caller's querier (a pgx.Tx, a pool, or outbox.SQL of a
// database/sql transaction):
//
//   - Catalog.List and Catalog.Get read; Catalog.Put creates or replaces one type and
//     Catalog.Delete removes one (ErrNotFound when it is not there).
//   - Catalog.Sync upserts the types of a file and reports those it does not list, removing
//     them only with SyncOptions.Prune; SyncOptions.DryRun writes nothing.
//   - Check checks a type without the database: its name is an event type, its schema compiles
//     (draft 2020-12 unless it names another with $schema; no $ref outside the schema is ever
//     fetched), its example is valid against it. Every write calls it first: bad input is
//     refused with ErrInvalid and the reason, and nothing is written.
//
// # Subscriptions
//
// When the catalog is not empty, an endpoint's event-type pattern must match at least one type
// in it: Catalog.CheckPatterns (CheckPatterns without the database) refuses one that matches
// none with an *UnknownPatternError naming the nearest names by edit distance ("did you mean
// order.created?"), and warns about one that matches only deprecated types. An empty catalog
// checks nothing, so the catalog is opt-in. The endpoint rules (package endpoints: the CLI, Go and
// the API) make the same check on every add and update, reading the catalog's names with their
// own query: package endpoints does not import this one, so that outbox (which still links
// endpoints for its deprecated names) does not link the JSON Schema library;
// UnknownPatternError and ErrUnknownType are endpoints' own.
//
// # Payloads
//
// A producer opts in to payload validation by giving outbox.Producer a Validator
// (NewValidator): Enqueue then refuses a payload its type's schema does not accept with a
// *PayloadError carrying the JSON pointer at fault, and an event type the catalog does not know
// (while it is not empty) with the nearest names. The Validator reads the whole catalog once and
// keeps it, compiled, for ValidatorConfig.MaxAge (a minute unless set); an event type it does
// not know makes it read the catalog again at once (at most once a second), so a type just
// added is known to the next Enqueue, and a changed schema within MaxAge. Producers that do not
// opt in link nothing of this package, nor its JSON Schema library
// (github.com/santhosh-tekuri/jsonschema/v6).
package catalog
