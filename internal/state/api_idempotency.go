package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The API's idempotency keys (outbox_api_idempotency): the first answer to a create sent with an
// Idempotency-Key, given again to a retry for IdempotencyTTL.

// IdempotencyTTL is how long a key's first answer is kept and given again.
const IdempotencyTTL = 24 * time.Hour

// IdempotentAnswer is the first answer to a request with a key.
type IdempotentAnswer struct {
	RequestHash string
	Status      int
	Body        string
}

// ClaimIdempotencyKey claims principal's key for a request whose hash is hash, in db's
// transaction, and returns the stored answer when the key was claimed before (and not expired):
// ok false means the key is the caller's to answer (RecordIdempotentAnswer, in the same
// transaction). A concurrent claim of the same key waits for this transaction, then sees its
// answer. It also deletes a few expired keys, so the table holds about a day of creates.
func ClaimIdempotencyKey(ctx context.Context, db DB, s, principal, key, hash string) (IdempotentAnswer, bool, error) {
	if _, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_api_idempotency} WHERE ctid IN (
		SELECT ctid FROM {outbox_api_idempotency} WHERE created_at < now() - $1::interval ORDER BY created_at LIMIT 100)`),
		IdempotencyTTL.String()); err != nil {
		return IdempotentAnswer{}, false, fmt.Errorf("delete expired idempotency keys: %w", err)
	}
	// An expired row of the same key is replaced: its answer is no longer given.
	var claimed bool
	err := db.QueryRow(ctx, schema.SQL(s, `INSERT INTO {outbox_api_idempotency} AS t (principal, key, request_hash, status, body)
		VALUES ($1, $2, $3, 0, '')
		ON CONFLICT (principal, key) DO UPDATE SET request_hash = excluded.request_hash, status = 0, body = '', created_at = now()
			WHERE t.created_at < now() - $4::interval
		RETURNING true`), principal, key, hash, IdempotencyTTL.String()).Scan(&claimed)
	if err == nil {
		return IdempotentAnswer{}, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return IdempotentAnswer{}, false, fmt.Errorf("claim the idempotency key: %w", err)
	}
	var a IdempotentAnswer
	err = db.QueryRow(ctx, schema.SQL(s, `SELECT request_hash, status, body FROM {outbox_api_idempotency}
		WHERE principal = $1 AND key = $2`), principal, key).Scan(&a.RequestHash, &a.Status, &a.Body)
	if err != nil {
		return a, false, fmt.Errorf("read the idempotency key's answer: %w", err)
	}
	return a, true, nil
}

// RecordIdempotentAnswer stores the answer of the request that claimed principal's key.
func RecordIdempotentAnswer(ctx context.Context, db DB, s, principal, key string, status int, body string) error {
	_, err := db.Exec(ctx, schema.SQL(s, `UPDATE {outbox_api_idempotency} SET status = $3, body = $4
		WHERE principal = $1 AND key = $2`), principal, key, status, body)
	if err != nil {
		return fmt.Errorf("record the idempotency key's answer: %w", err)
	}
	return nil
}
