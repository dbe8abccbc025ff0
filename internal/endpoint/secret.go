package endpoint

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/seal"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Bounds of a secret. An x-signature secret is used as its bytes; a standard-webhooks secret
// is whsec_ and the base64 of its key bytes.
const (
	MinSecretLen = 16   // characters of an x-signature secret
	MaxSecretLen = 1024 // characters of an x-signature secret
	MinWhsecKey  = 16   // bytes of a standard-webhooks key
	MaxWhsecKey  = 64   // bytes of a standard-webhooks key (the spec's upper bound)
	MaxSecrets   = 10   // secrets of one endpoint, the kept old ones included
)

// GenerateSecret returns a new secret for scheme: 32 random bytes, as base64url for
// x-signature, as whsec_<base64> for standard-webhooks.
func GenerateSecret(scheme signature.Scheme) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate a secret: %w", err)
	}
	if scheme == signature.StandardWebhooks {
		return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Fingerprint names a clear secret without revealing it: the first 8 hex digits of its
// SHA-256, which a partner can compute from the secret they hold
// (printf %s "$SECRET" | sha256sum | cut -c1-8).
func Fingerprint(clear string) string {
	sum := sha256.Sum256([]byte(clear))
	return hex.EncodeToString(sum[:4])
}

// CheckSecret checks a clear secret for scheme. The error never contains the secret.
func CheckSecret(scheme signature.Scheme, s string) error {
	if seal.IsSealed(s) {
		return fmt.Errorf("starts with %q, which marks a sealed secret: a clear secret cannot start so", seal.Prefix)
	}
	if scheme == signature.StandardWebhooks {
		k, err := signature.DecodeWhsec(s)
		if err != nil {
			return err
		}
		if len(k) < MinWhsecKey || len(k) > MaxWhsecKey {
			return fmt.Errorf("holds a %d-byte key; a standard-webhooks key is %d to %d bytes (leave the secret out to generate one)",
				len(k), MinWhsecKey, MaxWhsecKey)
		}
		return nil
	}
	n := utf8.RuneCountInString(s)
	switch {
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case n < MinSecretLen || n > MaxSecretLen:
		return fmt.Errorf("is %d characters long; a secret is %d to %d (leave it out to generate one)", n, MinSecretLen, MaxSecretLen)
	case strings.TrimSpace(s) != s:
		return errors.New("starts or ends with a space")
	case strings.ContainsFunc(s, unicode.IsControl):
		return errors.New("contains a control character")
	}
	return nil
}

// Clear returns the clear text of a stored secret value of endpoint id: itself when it is not
// sealed, else opened with ring. A sealed value without a ring is an error that says what to set.
func Clear(ring *seal.Keyring, id, value string) (string, error) {
	if !seal.IsSealed(value) {
		return value, nil
	}
	if ring == nil {
		kid, _ := seal.ID(value)
		return "", fmt.Errorf("the secret is sealed (key %s) and no secrets key is configured: "+
			"set OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file", kid)
	}
	return ring.Open(id, value)
}

// Keys returns the HMAC keys the endpoint signs with at now (its active secrets, opened with
// ring when sealed, in the row's order), and the earliest time after now when one of them
// expires (zero when none does), when the keys must be computed again.
func (r *Row) Keys(ring *seal.Keyring, now time.Time) (keys [][]byte, next time.Time, err error) {
	var clear []string
	for i, s := range r.Secrets {
		if !s.Active(now) {
			continue
		}
		if s.ExpiresAt != nil && (next.IsZero() || s.ExpiresAt.Before(next)) {
			next = *s.ExpiresAt
		}
		c, err := Clear(ring, r.ID, s.Value)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("endpoint %s: secret #%d: %w", r.ID, i+1, err)
		}
		clear = append(clear, c)
	}
	if len(clear) == 0 {
		return nil, time.Time{}, fmt.Errorf("endpoint %s: every secret has expired: rotate it (outbox-relay endpoint rotate-secret %s)", r.ID, r.ID)
	}
	keys, err = signature.Keys(r.SignatureScheme(), clear)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("endpoint %s: %w", r.ID, err)
	}
	return keys, next, nil
}

// NewSecret returns the stored form of a new clear secret of endpoint id: sealed with ring
// when it is not nil, fingerprinted, created now.
func NewSecret(ring *seal.Keyring, id, clear string, now time.Time) (Secret, error) {
	s := Secret{Value: clear, Fingerprint: Fingerprint(clear), CreatedAt: &now}
	if ring != nil {
		v, err := ring.Seal(id, clear)
		if err != nil {
			return Secret{}, err
		}
		s.Value = v
	}
	return s, nil
}
