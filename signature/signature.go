package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Scheme selects the signature headers.
type Scheme int

const (
	// XSignature is this project's scheme: X-Timestamp and X-Signature.
	XSignature Scheme = iota
	// StandardWebhooks is Standard Webhooks v1: webhook-id, webhook-timestamp, webhook-signature.
	StandardWebhooks
)

// String returns the scheme's flag value.
func (s Scheme) String() string {
	if s == StandardWebhooks {
		return "standard-webhooks"
	}
	return "x-signature"
}

// ParseScheme parses a --signature-scheme value.
func ParseScheme(v string) (Scheme, error) {
	switch v {
	case "", "x-signature":
		return XSignature, nil
	case "standard-webhooks":
		return StandardWebhooks, nil
	}
	return 0, fmt.Errorf("unknown signature scheme %q: use x-signature or standard-webhooks", v)
}

// ErrNoSecret means no usable secret was configured.
var ErrNoSecret = errors.New("no webhook secret configured")

// SplitSecrets splits a comma-separated list of secrets, dropping blanks and surrounding space.
func SplitSecrets(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Keys turns secrets into HMAC keys for a scheme. X-Signature uses a secret's bytes as they are;
// Standard Webhooks needs `whsec_<base64>` and uses the decoded bytes. Errors never contain a
// secret.
func Keys(scheme Scheme, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, ErrNoSecret
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		if scheme != StandardWebhooks {
			keys = append(keys, []byte(s))
			continue
		}
		k, err := DecodeWhsec(s)
		if err != nil {
			return nil, fmt.Errorf("secret #%d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// DecodeWhsec decodes a Standard Webhooks secret `whsec_<base64>` into its key bytes.
func DecodeWhsec(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, errors.New("a standard-webhooks secret must look like whsec_<base64>")
	}
	k, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(k) == 0 {
		return nil, errors.New("the part after whsec_ is not valid standard base64")
	}
	return k, nil
}

// MAC returns HMAC-SHA256(key, parts[0] || parts[1] || ...).
func MAC(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// AppendX appends the X-Signature header value for body sent at unix time ts, one
// "sha256=<hex>" per key, comma-separated.
func AppendX(dst []byte, keys [][]byte, ts int64, body []byte) []byte {
	var tsBuf [20]byte
	t := strconv.AppendInt(tsBuf[:0], ts, 10)
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, "sha256="...)
		dst = hex.AppendEncode(dst, MAC(k, t, body))
	}
	return dst
}

// AppendStandard appends the webhook-signature header value, one "v1,<base64>" per key,
// space-separated.
func AppendStandard(dst []byte, keys [][]byte, id string, ts int64, body []byte) []byte {
	var buf [64]byte
	prefix := append(buf[:0], id...)
	prefix = append(prefix, '.')
	prefix = strconv.AppendInt(prefix, ts, 10)
	prefix = append(prefix, '.')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, "v1,"...)
		dst = base64.StdEncoding.AppendEncode(dst, MAC(k, prefix, body))
	}
	return dst
}

// Signer signs with a fixed set of keys; it is safe for concurrent use. It produces the same
// values as AppendX and AppendStandard.
//
// It keeps, per key, only HMAC-SHA256's two padded-key states (about 200 bytes), and borrows a
// SHA-256 from a pool shared by every Signer for each signature: a relay with thousands of
// endpoints holds one Signer each, so a pool of HMACs per Signer (about 2 KB each) would grow
// with the endpoints, not with the requests in flight.
type Signer struct {
	keys []hmacKey
}

// hmacKey is a key's SHA-256 states after its inner and outer padded key (RFC 2104), as
// MarshalBinary writes them: a MAC starts from them instead of hashing the padded key again.
type hmacKey struct{ inner, outer []byte }

var sha256s = sync.Pool{New: func() any { return sha256.New() }}

// NewSigner returns a Signer for keys.
func NewSigner(keys [][]byte) *Signer {
	s := &Signer{keys: make([]hmacKey, len(keys))}
	for i, k := range keys {
		s.keys[i] = newHMACKey(k)
	}
	return s
}

func newHMACKey(key []byte) hmacKey {
	if len(key) > sha256.BlockSize {
		sum := sha256.Sum256(key)
		key = sum[:]
	}
	var pad [sha256.BlockSize]byte
	state := func(x byte) []byte {
		for i := range pad {
			pad[i] = x
			if i < len(key) {
				pad[i] ^= key[i]
			}
		}
		h := sha256.New()
		h.Write(pad[:])
		b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			panic("signature: SHA-256 state: " + err.Error()) // crypto/sha256's digest always marshals
		}
		return b
	}
	return hmacKey{inner: state(0x36), outer: state(0x5c)}
}

func (s *Signer) sum(i int, dst []byte, parts ...[]byte) []byte {
	h := sha256s.Get().(hash.Hash)
	defer sha256s.Put(h)
	k := s.keys[i]
	restore(h, k.inner)
	for _, p := range parts {
		h.Write(p)
	}
	var in [sha256.Size]byte
	inner := h.Sum(in[:0])
	restore(h, k.outer)
	h.Write(inner)
	return h.Sum(dst)
}

func restore(h hash.Hash, state []byte) {
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		panic("signature: SHA-256 state: " + err.Error()) // written by the same package's MarshalBinary
	}
}

// AppendX appends the X-Signature header value, as the function AppendX.
func (s *Signer) AppendX(dst []byte, ts int64, body []byte) []byte {
	var tsBuf [20]byte
	t := strconv.AppendInt(tsBuf[:0], ts, 10)
	var mac [sha256.Size]byte
	for i := range s.keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, "sha256="...)
		dst = hex.AppendEncode(dst, s.sum(i, mac[:0], t, body))
	}
	return dst
}

// AppendStandard appends the webhook-signature header value, as the function AppendStandard.
func (s *Signer) AppendStandard(dst []byte, id string, ts int64, body []byte) []byte {
	var buf [64]byte
	prefix := append(buf[:0], id...)
	prefix = append(prefix, '.')
	prefix = strconv.AppendInt(prefix, ts, 10)
	prefix = append(prefix, '.')
	var mac [sha256.Size]byte
	for i := range s.keys {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, "v1,"...)
		dst = base64.StdEncoding.AppendEncode(dst, s.sum(i, mac[:0], prefix, body))
	}
	return dst
}
