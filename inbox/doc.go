// Package inbox is the consumer side of outbox-relay: an http.Handler that verifies each signed
// webhook, records its event id in inbox_events and applies the event in the same PostgreSQL
// transaction, so that at-least-once delivery becomes exactly-once effect.
//
// # Mounting
//
//	h, err := inbox.New(pool, secrets, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
//		_, err := tx.Exec(ctx, `INSERT INTO reservations (event_id) VALUES ($1)`, ev.ID)
//		return err
//	}, inbox.Config{Logger: log})
//	mux.Handle("POST /webhook", h)
//
// New takes a DB: a *pgxpool.Pool, or anything else that begins a pgx.Tx. A service on
// database/sql (lib/pq, pgx's stdlib, any PostgreSQL driver) calls NewSQL with a *sql.DB
// instead, and its SQLProcessFunc gets the same transaction as a *sql.Tx. Everything below
// holds for both.
//
// # Installing the table
//
// inboxmigrate.Migrate(ctx, pool, cfg) (package inbox/inboxmigrate, so that a program that
// only mounts the inbox links no migration framework) creates inbox_events and its indexes,
// nothing of the outbox, with its own version history (migrations.InboxHistoryTable, never
// goose_db_version): call it at start-up of a consumer that does not ship the relay. `outbox-relay migrate --inbox-only` does
// the same from the command line, and the relay's full `outbox-relay migrate` creates the table
// too; either may come first.
//
// # Schema
//
// Config.Schema names the schema of inbox_events, for inboxmigrate.Migrate, the Handler, the Processor and
// Prune alike. Left empty, the names are unqualified, so the connection's search_path decides:
// the table of current_schema(), where inboxmigrate.Migrate creates it. This is the relay's rule too.
//
// # Brokers
//
// A consumer of the relay's NATS or Kafka destination gets the same guarantee from a Processor
// (NewProcessor, NewSQLProcessor): Process(ctx, headers, body) reads the event from the
// message (the same X-Event-* headers, no signature: the broker authenticated the publisher),
// and records and applies it in one transaction, as the Handler does from step 4 on.
// Acknowledge the message only after Process returned nil.
//
// # Pruning
//
// inbox_events keeps a row per event, and the row is what recognises a duplicate. Prune
// deletes done rows older than a retention, in short batches through an index of their own;
// Config.Retention does it hourly in the background (Close stops it). The trade-off: an event
// delivered again after its row is pruned is applied again. So the retention must be longer
// than the sender may resend: Prune refuses one shorter than PruneOptions.RetryHorizon
// (DefaultRetryHorizon, 48 hours, covers the relay's retries with its defaults), and it
// should be longer than the relay keeps delivered events, since `outbox-relay replay` can
// re-send any of those. The default, no Retention, keeps every row: no duplicate is ever
// applied twice.
//
// # Order of checks
//
// Each request goes through these steps; the first that fails decides the answer.
//
//  1. Sender: with Config.AllowedNetworks set, the client address (the peer, or behind a
//     Config.TrustedProxies proxy the right-most untrusted X-Forwarded-For entry) must be in
//     one of them.
//  2. Size: a body over Config.MaxBodyBytes (1 MiB by default) is refused, unread past the
//     limit. A gzip Content-Encoding is undone, within the same limit; other encodings are
//     refused.
//  3. Signature: the scheme follows from the headers (webhook-signature means Standard
//     Webhooks, else X-Signature); any configured secret may match, each compared in constant
//     time; the signed timestamp must be within Config.Tolerance (5 minutes by default) of now,
//     in either direction, so a captured request cannot be replayed later. For a gzip body the
//     signature may cover the body as sent or decompressed.
//  4. Content: the format follows from the headers (see DetectFormat and ParseEvents): raw,
//     CloudEvents binary mode, or a CloudEvents batch. Every event id must be a uuid and every
//     payload JSON.
//  5. One transaction: INSERT INTO inbox_events ... ON CONFLICT (id) DO NOTHING. If the id was
//     already there the event is a duplicate: commit and answer 200 without calling the
//     ProcessFunc. Otherwise call it with the same transaction, mark the row done, commit.
//  6. Failure: an error or panic from the ProcessFunc, or a database error, rolls everything
//     back. Nothing partial is ever left: no inbox row, no effect.
//
// Concurrent deliveries of one event are safe: the second INSERT waits for the first
// transaction, then does nothing if it committed, or goes ahead if it rolled back.
//
// # Batches
//
// A CloudEvents batch (Content-Type application/cloudevents-batch+json) is applied in ONE
// transaction: every id is claimed in one INSERT (in id order); the ProcessFunc is called once
// per new event, in the batch's order, with that same transaction, exactly as for a single
// event, so existing ProcessFuncs need no change; the new rows are marked done and everything
// commits together. Events already recorded, and repeats within the batch, are skipped without
// calling the ProcessFunc: they are not errors. An error or panic on any event rolls the whole
// batch back and answers 500, so 200 means every event of the batch is applied. Under
// Standard Webhooks the batch's webhook-id must be cloudevents.BatchID of its ids.
//
// # Status codes
//
//	200  processed; or a duplicate, absorbed, with X-Inbox-Duplicate: true (for a batch: all
//	     applied, the body says how many were new; the header when none was)
//	400  ErrMalformed: genuine signature, but the id is not a uuid, the body is not JSON (or
//	     not storable as jsonb), the timestamp or X-Attempt is not a number; retrying won't help
//	401  ErrMissingSignature, ErrBadSignature, ErrStaleTimestamp: not provably from the relay,
//	     or not now (a stale timestamp is an authentication failure, hence 401, not 400)
//	403  ErrForbidden: the sender is outside Config.AllowedNetworks
//	405  not a POST
//	413  ErrBodyTooLarge, before or after decompression
//	415  ErrUnsupported: a Content-Encoding other than gzip, or a structured-mode single event
//	500  the ProcessFunc returned an error or panicked; rolled back; the relay retries
//	503  the database failed (with Retry-After: 5); rolled back; the relay retries
//
// Only a 2xx tells the relay the event is delivered; whatever it does next with another answer
// (retry, park), it sends the same event id, so a 5xx costs a retry and never a lost or doubled
// effect. Stats counts each kind of answer, including the duplicates absorbed.
//
// # Secrets and schemes
//
// X-Signature: `X-Signature: sha256=<hex HMAC-SHA256(secret, X-Timestamp || body)>`; the secret's
// bytes are the key, as they are. Standard Webhooks: `webhook-signature: v1,<base64>` over
// "<webhook-id>.<webhook-timestamp>.<body>", keyed with the decoded part of a `whsec_<base64>`
// secret; only whsec_ secrets take part. One list may hold both kinds. During a rotation the
// relay sends one signature per secret (`sha256=<old>,sha256=<new>`, or space-separated v1
// entries) and a consumer that knows either secret accepts. Package signature states the
// contract byte for byte and has the functions this package verifies with.
//
// Under X-Signature the event id is not covered by the signature (the contract signs the
// timestamp and body only), so within the tolerance window a captured request could be
// replayed under another X-Event-Id. Standard Webhooks signs the id; prefer it where that
// matters.
//
// # Without PostgreSQL
//
// Verify checks a signature on its own, ParseEvent (or ParseEvents, for batches too) reads the
// event, and StatusCode gives the answer for their errors, for consumers that keep their idempotency elsewhere.
package inbox
