package portal

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/actor"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A session is a row of outbox_portal_sessions, found by the SHA-256 of a random value the
// browser holds in a cookie (HttpOnly, SameSite=Lax, Secure over TLS), one cookie per area so a
// tenant's cookie is never sent to the console's pages. Its CSRF token is an HMAC of that value,
// so it is tied to the session and needs no storage: a page from another site can neither read
// the cookie nor compute the token.

// session is a signed-in browser: who it acts for, and its CSRF token.
type session struct {
	who  actor.Actor
	csrf string
	raw  string // the cookie's value
}

// errUsed means a portal link opened a session already.
var errUsed = errors.New("portal: this link was used already")

func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func csrfOf(raw string) string {
	m := hmac.New(sha256.New, []byte(raw))
	m.Write([]byte("outbox-relay portal csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// startSession records a new session for who, lasting the configured time; linkHash (nil for an
// operator) marks the link that opened it as used until linkExpires. It answers errUsed when
// the link opened a session before.
func (p *Portal) startSession(ctx context.Context, who actor.Actor, linkHash []byte, linkExpires time.Time) (session, error) {
	raw, err := newSecret()
	if err != nil {
		return session{}, err
	}
	kind, principal := "tenant", who.Tenant
	if who.Operator {
		kind, principal = "operator", who.Name
	}
	now := time.Now()
	expires := now.Add(p.cfg.SessionTTL)
	keep := expires
	if linkExpires.After(keep) {
		keep = linkExpires
	}
	err = pgx.BeginFunc(ctx, p.cfg.Pool, func(tx pgx.Tx) error {
		// Rows past their keep_until are no longer needed: a few go with every sign-in, through
		// the index, so the table stays the size of the sessions alive.
		if _, err := tx.Exec(ctx, p.sql(`DELETE FROM {outbox_portal_sessions} WHERE id_hash IN (
			SELECT id_hash FROM {outbox_portal_sessions} WHERE keep_until < now() ORDER BY keep_until LIMIT 100)`)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, p.sql(`INSERT INTO {outbox_portal_sessions} (id_hash, kind, principal, link_hash, expires_at, keep_until)
			VALUES ($1, $2, $3, $4, $5, $6)`), hash(raw), kind, principal, linkHash, expires, keep)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "outbox_portal_sessions_link_key" {
		return session{}, errUsed
	}
	if err != nil {
		return session{}, fmt.Errorf("record the session: %w", err)
	}
	return session{who: who, csrf: csrfOf(raw), raw: raw}, nil
}

// lookup returns the live session of the cookie's value, of the kind the area serves.
func (p *Portal) lookup(ctx context.Context, raw string, operator bool) (session, bool, error) {
	var kind, principal string
	err := p.cfg.Pool.QueryRow(ctx, p.sql(`SELECT kind, principal FROM {outbox_portal_sessions}
		WHERE id_hash = $1 AND expires_at > now()`), hash(raw)).Scan(&kind, &principal)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (kind == "operator") != operator) {
		return session{}, false, nil
	}
	if err != nil {
		return session{}, false, fmt.Errorf("read the session: %w", err)
	}
	s := session{csrf: csrfOf(raw), raw: raw, who: actor.Actor{Name: "portal", Tenant: principal}}
	if operator {
		s.who = actor.Actor{Operator: true, Name: principal}
	}
	return s, true, nil
}

// endSession ends the session of the cookie's value now: a sign-out. The row stays until its
// keep_until, so the link that opened it stays used.
func (p *Portal) endSession(ctx context.Context, raw string) error {
	_, err := p.cfg.Pool.Exec(ctx, p.sql(`UPDATE {outbox_portal_sessions} SET expires_at = now()
		WHERE id_hash = $1 AND expires_at > now()`), hash(raw))
	if err != nil {
		return fmt.Errorf("end the session: %w", err)
	}
	return nil
}

func (p *Portal) sql(q string) string { return schema.SQL(p.cfg.Schema, q) }

// secure reports whether the browser reached the page over TLS: directly, or through a proxy
// that says so (X-Forwarded-Proto). Trusting the header can only make a cookie stricter.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

func (p *Portal) setCookie(w http.ResponseWriter, r *http.Request, a area, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: a.cookie, Value: value, Path: a.base + "/", MaxAge: maxAge, HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteLaxMode})
}

// checkCSRF compares a form's token with the session's, in constant time.
func checkCSRF(r *http.Request, s session) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}
