// Package seal keeps endpoint signing secrets sealed at rest: AES-256-GCM under a key only the
// relay and the operator's tools hold, so a database dump, a read replica or the WAL carries no
// signing key in clear.
//
// # Envelope
//
// A sealed value is one line of text:
//
//	sealed:v1:<key id>:<base64url of nonce || ciphertext || tag>
//
// v1 is the format: AES-256-GCM with a random 96-bit nonce. The key id is the first 8 hex
// digits of SHA-256 over a fixed label and the key, so it names the key without revealing it,
// and an operator never has to invent one. The additional data binds the version, the key id
// and the caller's context (for an endpoint secret: the endpoint's id), so a sealed value copied
// into another endpoint's row does not open there.
//
// # Keys and rotation
//
// A Keyring holds one or more 32-byte keys, written as base64 (`openssl rand -base64 32`), one
// per line or comma-separated; lines starting with # are comments. The first key seals; every
// key opens what it sealed. To rotate: put a new key first and keep the old one after it,
// re-seal the stored values (`outbox-relay endpoint reseal`), then remove the old key.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts every sealed value (any version).
const Prefix = "sealed:"

const v1 = Prefix + "v1:"

// KeySize is the size of a key in bytes (AES-256).
const KeySize = 32

// ErrUnknownKey is wrapped by Open when the value was sealed with a key the keyring lacks.
var ErrUnknownKey = errors.New("sealed with a key that is not in the secrets key file")

// ErrOpen is wrapped by Open when a value does not open: it is damaged, or it was sealed for
// another context (an endpoint secret copied from another endpoint's row, or a renamed id).
var ErrOpen = errors.New("sealed value does not open")

// Keyring holds the keys that seal and open values. It is safe for concurrent use.
type Keyring struct {
	keys []key // keys[0] seals
}

type key struct {
	id   string
	aead cipher.AEAD
}

// Parse reads keys: base64 (standard or URL alphabet, padded or not) of KeySize bytes each,
// separated by newlines or commas, blank lines and lines starting with # ignored. The first
// key seals. The error names the line, never its content.
func Parse(text string) (*Keyring, error) {
	raws, err := ParseRaw(text, "secrets key")
	if err != nil {
		return nil, err
	}
	var r Keyring
	for _, raw := range raws {
		k, err := newKey(raw.Key)
		if err != nil {
			return nil, err
		}
		r.keys = append(r.keys, k)
	}
	return &r, nil
}

// RawKey is one key of a key file, with its id (KeyID).
type RawKey struct {
	ID  string
	Key []byte
}

// ParseRaw reads a key file as Parse does and returns its keys as they are, first first, for
// another use of the same format (the API's token signing keys); what names the keys in its
// errors ("secrets key"). The error names the line, never its content.
func ParseRaw(text, what string) ([]RawKey, error) {
	var out []RawKey
	seen := map[string]bool{}
	for n, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for item := range strings.SplitSeq(line, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			raw, err := decodeKey(item)
			if err != nil {
				return nil, fmt.Errorf("%s on line %d: %w", what, n+1, err)
			}
			id := KeyID(raw)
			if seen[id] {
				return nil, fmt.Errorf("%s on line %d: the same key (id %s) is listed twice", what, n+1, id)
			}
			seen[id] = true
			out = append(out, RawKey{ID: id, Key: raw})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s: give one or more keys of 32 random bytes in base64 (openssl rand -base64 32)", what)
	}
	return out, nil
}

func newKey(raw []byte) (key, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return key{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, err
	}
	return key{id: KeyID(raw), aead: aead}, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("decodes to %d bytes, not %d: make a key with openssl rand -base64 32", len(raw), KeySize)
			}
			return raw, nil
		}
	}
	return nil, errors.New("is not base64: make a key with openssl rand -base64 32")
}

// KeyID names a key: the first 8 hex digits of SHA-256 over a label and the key.
func KeyID(raw []byte) string {
	h := sha256.New()
	h.Write([]byte("outbox-relay secrets key id\x00"))
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// ID is the id of the key that seals.
func (r *Keyring) ID() string { return r.keys[0].id }

// Has reports whether the keyring holds the key with this id.
func (r *Keyring) Has(id string) bool { return r.find(id) != nil }

func (r *Keyring) find(id string) *key {
	for i := range r.keys {
		if r.keys[i].id == id {
			return &r.keys[i]
		}
	}
	return nil
}

// Seal seals clear under the first key, bound to binding (for an endpoint secret, the endpoint id).
func (r *Keyring) Seal(binding, clear string) (string, error) {
	k := r.keys[0]
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(clear)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	sealed := k.aead.Seal(nonce, nonce, []byte(clear), additional(k.id, binding))
	return v1 + k.id + ":" + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open returns the clear text of a value Seal made with the same binding, with any key of the
// keyring. Errors never contain the value.
func (r *Keyring) Open(binding, sealed string) (string, error) {
	id, body, err := split(sealed)
	if err != nil {
		return "", err
	}
	k := r.find(id)
	if k == nil {
		return "", fmt.Errorf("%w (key id %s): add that key to the file again, after the first", ErrUnknownKey, id)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < k.aead.NonceSize()+k.aead.Overhead() {
		return "", fmt.Errorf("%w: it is damaged (its base64 part is malformed or short)", ErrOpen)
	}
	ns := k.aead.NonceSize()
	clear, err := k.aead.Open(nil, raw[:ns], raw[ns:], additional(id, binding))
	if err != nil {
		return "", fmt.Errorf("%w: it is damaged, or it was sealed for another endpoint id", ErrOpen)
	}
	return string(clear), nil
}

// IsSealed reports whether s is a sealed value (of any version): clear secrets never start
// with Prefix.
func IsSealed(s string) bool { return strings.HasPrefix(s, Prefix) }

// ID returns the key id of a sealed value, or false when s is not a well-formed v1 value.
func ID(sealed string) (string, bool) {
	id, _, err := split(sealed)
	return id, err == nil
}

func split(sealed string) (id, body string, err error) {
	rest, ok := strings.CutPrefix(sealed, v1)
	if !ok {
		if IsSealed(sealed) {
			return "", "", fmt.Errorf("%w: it is not of version v1 (a newer relay sealed it?)", ErrOpen)
		}
		return "", "", fmt.Errorf("%w: it does not start with %s", ErrOpen, v1)
	}
	id, body, ok = strings.Cut(rest, ":")
	if !ok || !isKeyID(id) || body == "" || strings.ContainsFunc(body, notBase64URL) {
		return "", "", fmt.Errorf("%w: it is not sealed:v1:<key id>:<base64>", ErrOpen)
	}
	return id, body, nil
}

// isKeyID reports whether id is 8 lowercase hex digits, as KeyID makes.
func isKeyID(id string) bool {
	if len(id) != 8 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func notBase64URL(c rune) bool {
	return (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_'
}

func additional(id, binding string) []byte {
	return []byte(v1 + id + ":" + binding)
}
