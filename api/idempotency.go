package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// maxIdempotencyKey bounds an Idempotency-Key.
const maxIdempotencyKey = 255

// idempotencyKey reads the request's Idempotency-Key: "" when absent.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return "", nil
	}
	if len(k) > maxIdempotencyKey || strings.ContainsFunc(k, func(c rune) bool { return c < ' ' || c > '~' }) {
		return "", problem(http.StatusBadRequest, typeMalformed, "the Idempotency-Key header is refused",
			FieldIssue{Field: "Idempotency-Key", Detail: "1 to 255 printable ASCII characters, e.g. a UUID"})
	}
	return k, nil
}

// requestHash identifies a request for its key: a retry must be the same request.
func requestHash(r *http.Request, b []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// replayAnswer claims p's key in tx; when the key answered before, it writes that answer again
// (or refuses a different request under the same key) and reports done.
func (a *API) replayAnswer(ctx context.Context, tx pgx.Tx, w http.ResponseWriter, r *http.Request, p principal, key string,
	b body) (bool, error) {
	canonical, _ := json.Marshal(b) // the fields sorted by name, each value as sent
	hash := requestHash(r, canonical)
	prev, seen, err := state.ClaimIdempotencyKey(ctx, tx, a.cfg.Schema, p.key(), key, hash)
	if err != nil || !seen {
		return false, err
	}
	if prev.RequestHash != hash {
		return true, problem(http.StatusConflict, typeKeyReused, "this Idempotency-Key was sent with another request "+
			"in the last 24 hours: use a new key for a new request")
	}
	body := prev.Body
	if a.ring != nil {
		if body, err = a.ring.Open(idempotencyBinding(p, key), prev.Body); err != nil {
			return true, err
		}
	}
	w.Header().Set("Idempotent-Replayed", "true")
	writeRaw(w, prev.Status, []byte(body))
	return true, nil
}

// recordAnswer stores the answer of the request that claimed the key, sealed when the API
// has the secrets keys (it holds the endpoint's secret).
func (a *API) recordAnswer(ctx context.Context, tx pgx.Tx, p principal, key string, status int, out []byte) error {
	body := string(out)
	if a.ring != nil {
		var err error
		if body, err = a.ring.Seal(idempotencyBinding(p, key), body); err != nil {
			return err
		}
	}
	return state.RecordIdempotentAnswer(ctx, tx, a.cfg.Schema, p.key(), key, status, body)
}

func idempotencyBinding(p principal, key string) string { return "idempotency:" + p.key() + ":" + key }
