package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
)

// Audiences of a tenant token: what it may be used for. A token is accepted only where its
// audience is expected, so a portal link's token is no API token and the other way round.
const (
	// AudienceAPI is a token for this API (Bearer).
	AudienceAPI = "outbox-relay-api"
	// AudiencePortal is a token of a portal link (issue 36), exchanged once for a session.
	AudiencePortal = "outbox-relay-portal"
)

// issuer is the iss claim of every token minted here.
const issuer = "outbox-relay"

// MaxTokenTTL bounds a token's lifetime: a tenant token is a bearer credential, so it should
// expire within hours, not live on.
const MaxTokenTTL = 31 * 24 * time.Hour

// ErrToken is wrapped by every refusal of a token (expired, tampered, unknown key, wrong
// audience). The API answers 401 and says nothing else.
var ErrToken = errors.New("invalid token")

// Keys sign and verify tenant tokens: JWTs (RFC 7519) with HS256, the key id in the header's
// kid. The first key signs; every key verifies, so keys rotate as the secrets key does: put a
// new key first, keep the old one until the tokens it signed have expired, then drop it.
//
// A key is 32 random bytes in base64 (openssl rand -base64 32), one per line (or
// comma-separated, # comments), the format of the secrets key file. The HMAC key is derived
// from it, so a file shared with the secrets key would still not sign with the key that seals.
// It is safe for concurrent use.
type Keys struct {
	keys []signingKey // keys[0] signs
}

type signingKey struct {
	id  string
	mac []byte
}

// ParseKeys reads the signing keys (--api-signing-key-file, OUTBOX_RELAY_API_SIGNING_KEY). The
// error names the line, never a key.
func ParseKeys(text string) (*Keys, error) {
	raws, err := seal.ParseRaw(text, "API signing key")
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	k := &Keys{}
	for _, r := range raws {
		m := hmac.New(sha256.New, r.Key)
		m.Write([]byte("outbox-relay api token key v1"))
		k.keys = append(k.keys, signingKey{id: r.ID, mac: m.Sum(nil)})
	}
	return k, nil
}

// KeyID names the key that signs (8 hex digits derived from it, not the key).
func (k *Keys) KeyID() string { return k.keys[0].id }

// Token is what a tenant token says.
type Token struct {
	// Tenant is the tenant the token acts for: its requests see and change only that tenant's
	// endpoints. Required; the rule of a tenant id (outbox.Event.TenantID).
	Tenant string
	// TTL is how long the token is valid from its minting: 1s to MaxTokenTTL. Required.
	TTL time.Duration
	// Audience is what the token is for. Empty: AudienceAPI.
	Audience string
}

// claims are the token's JWT claims: sub is the tenant.
type claims struct {
	jwt.RegisteredClaims
}

// Mint returns a signed token for t, valid from now.
func (k *Keys) Mint(t Token) (string, error) {
	return k.mint(t, time.Now())
}

func (k *Keys) mint(t Token, now time.Time) (string, error) {
	switch {
	case t.Tenant == "":
		return "", errors.New("api: a token needs a tenant: the id the application gives that customer (outbox.Event.TenantID)")
	case t.TTL < time.Second || t.TTL > MaxTokenTTL:
		return "", fmt.Errorf("api: token lifetime %s: use 1s to %s (a tenant token is a bearer credential: keep it short, e.g. 1h)",
			t.TTL, MaxTokenTTL)
	}
	if err := endpoint.CheckTenant(t.Tenant); err != nil {
		return "", fmt.Errorf("api: %w", err)
	}
	aud := t.Audience
	if aud == "" {
		aud = AudienceAPI
	}
	// jti makes every token unique, even two minted in the same second for the same tenant: a
	// portal link opens once (package portal records it), and the next link must still open.
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	c := claims{jwt.RegisteredClaims{Issuer: issuer, Subject: t.Tenant, Audience: jwt.ClaimStrings{aud},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(t.TTL)),
		ID: base64.RawURLEncoding.EncodeToString(jti[:])}}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = k.keys[0].id
	return tok.SignedString(k.keys[0].mac)
}

// Verify checks a token's signature, key, expiry, issuer and audience (empty: AudienceAPI) and
// returns its tenant. Every refusal wraps ErrToken.
func (k *Keys) Verify(token, audience string) (string, error) {
	return k.verify(token, audience, time.Now())
}

func (k *Keys) verify(token, audience string, now time.Time) (string, error) {
	if audience == "" {
		audience = AudienceAPI
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		i := slices.IndexFunc(k.keys, func(s signingKey) bool { return s.id == kid })
		if i < 0 {
			return nil, fmt.Errorf("key %q is not among the signing keys", kid)
		}
		return k.keys[i].mac, nil
	}, jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(issuer), jwt.WithAudience(audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(func() time.Time { return now }))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrToken, err)
	}
	if c.Subject == "" || endpoint.CheckTenant(c.Subject) != nil {
		return "", fmt.Errorf("%w: no valid tenant in sub", ErrToken)
	}
	return c.Subject, nil
}
