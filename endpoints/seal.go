package endpoints

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/seal"
)

// Sealer seals endpoint secrets at rest with AES-256-GCM, so outbox_endpoints, its dumps, its
// replicas and the WAL hold only "sealed:v1:<key id>:<base64>". The relay opens them with the
// same keys (OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file). A sealed secret is bound to its
// endpoint's id: copied into another row, it does not open.
//
// It is safe for concurrent use.
type Sealer struct {
	ring *seal.Keyring
}

// NewSealer reads keys: one or more 32-byte keys in base64 (make one with
// `openssl rand -base64 32`), one per line or comma-separated, lines starting with # ignored.
// The first key seals; every key opens. To rotate keys, put the new key first, keep the old
// one after it, run Store.Reseal on every endpoint (`outbox-relay endpoint reseal`), then
// drop the old key. The error never contains a key.
func NewSealer(keys string) (*Sealer, error) {
	r, err := seal.Parse(keys)
	if err != nil {
		return nil, fmt.Errorf("endpoints: %w", err)
	}
	return &Sealer{ring: r}, nil
}

// KeyID names the key that seals (8 hex digits derived from it, not the key).
func (s *Sealer) KeyID() string { return s.ring.ID() }

// Unseal returns endpoint id's secret value in clear: a clear value as it is, a sealed one
// opened with any of the keys. The error never contains the value.
func (s *Sealer) Unseal(id, value string) (string, error) {
	var ring *seal.Keyring
	if s != nil {
		ring = s.ring
	}
	clear, err := endpoint.Clear(ring, id, value)
	if err != nil {
		return "", fmt.Errorf("endpoints: endpoint %s: %w", id, err)
	}
	return clear, nil
}

func (s *Sealer) keyring() *seal.Keyring {
	if s == nil {
		return nil
	}
	return s.ring
}
