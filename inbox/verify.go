package inbox

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// Header names of the wire contract.
const (
	headerXSignature = signature.HeaderXSignature
	headerXTimestamp = signature.HeaderXTimestamp
	headerXEventID   = "X-Event-Id"
	headerWebhookID  = signature.HeaderWebhookID
	headerWebhookTS  = signature.HeaderWebhookTimestamp
	headerWebhookSig = signature.HeaderWebhookSignature
)

// DefaultTolerance is how far a signature's timestamp may be from now, either way, when the
// configured tolerance is zero. It matches the Standard Webhooks reference libraries.
const DefaultTolerance = signature.DefaultTolerance

// Verifier checks webhook signatures against a fixed list of secrets. It is safe for
// concurrent use.
//
// A secret is used as the relay uses it: for X-Signature, its bytes as they are (a `whsec_`
// secret included, prefix and all); for Standard Webhooks, only `whsec_<base64>` secrets count,
// keyed with their decoded bytes. So one list can hold both kinds, and a list that is the
// relay's --webhook-secret verifies whichever --signature-scheme the relay runs with.
type Verifier struct {
	xKeys     [][]byte
	stdKeys   [][]byte
	tolerance time.Duration
}

// NewVerifier returns a Verifier for secrets, the first of which is usually the current one
// and the rest, during a rotation, the old ones: any one may match. A tolerance of zero means
// DefaultTolerance. It fails if secrets is empty, a tolerance is negative, or a `whsec_` secret
// does not decode; errors never contain a secret.
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	if tolerance < 0 {
		return nil, fmt.Errorf("inbox: negative signature tolerance %s", tolerance)
	}
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	xKeys, err := signature.Keys(signature.XSignature, secrets)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	var stdKeys [][]byte
	for i, s := range secrets {
		if !strings.HasPrefix(s, "whsec_") {
			continue
		}
		k, err := signature.DecodeWhsec(s)
		if err != nil {
			return nil, fmt.Errorf("inbox: secret #%d: %w", i+1, err)
		}
		stdKeys = append(stdKeys, k)
	}
	return &Verifier{xKeys: xKeys, stdKeys: stdKeys, tolerance: tolerance}, nil
}

// Verify checks that body and the headers h were signed with one of the secrets, no more than
// the tolerance away from now. It needs no database; see StatusCode for the answer to give.
// See NewVerifier for how secrets are read, and the package doc for the schemes.
func Verify(h http.Header, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	v, err := NewVerifier(secrets, tolerance)
	if err != nil {
		return err
	}
	return v.Verify(h, body, now)
}

// Verify checks that body and the headers h were signed with one of v's secrets, no more than
// the tolerance away from now. The scheme follows from the headers: webhook-signature means
// Standard Webhooks (and wins if both are present), X-Signature means X-Signature. The error
// wraps ErrMissingSignature, ErrBadSignature, ErrStaleTimestamp, or ErrMalformed for a genuine
// signature over a timestamp that is not an integer.
func (v *Verifier) Verify(h http.Header, body []byte, now time.Time) error {
	ts, err := v.check(h, body)
	if err != nil {
		return err
	}
	return v.fresh(ts, now)
}

// check verifies the MAC and returns the signed timestamp, still unparsed.
func (v *Verifier) check(h http.Header, body []byte) (string, error) {
	if sigs := h.Values(headerWebhookSig); len(sigs) > 0 {
		return v.checkStandard(h, sigs, body)
	}
	if sigs := h.Values(headerXSignature); len(sigs) > 0 {
		return v.checkX(h, sigs, body)
	}
	return "", fmt.Errorf("%w: no %s or %s header", ErrMissingSignature, headerXSignature, "webhook-signature")
}

func (v *Verifier) checkX(h http.Header, sigs []string, body []byte) (string, error) {
	ts := h.Get(headerXTimestamp)
	if ts == "" {
		return "", fmt.Errorf("%w: %s without %s", ErrMissingSignature, headerXSignature, headerXTimestamp)
	}
	if !signature.VerifyX(v.xKeys, ts, body, sigs...) {
		return "", fmt.Errorf("%w (%s)", ErrBadSignature, headerXSignature)
	}
	return ts, nil
}

func (v *Verifier) checkStandard(h http.Header, sigs []string, body []byte) (string, error) {
	id, ts := h.Get(headerWebhookID), h.Get(headerWebhookTS)
	if id == "" || ts == "" {
		return "", fmt.Errorf("%w: webhook-signature without webhook-id and webhook-timestamp", ErrMissingSignature)
	}
	if !signature.VerifyStandard(v.stdKeys, id, ts, body, sigs...) {
		if len(v.stdKeys) == 0 {
			return "", fmt.Errorf("%w (webhook-signature): no whsec_ secret is configured", ErrBadSignature)
		}
		return "", fmt.Errorf("%w (webhook-signature)", ErrBadSignature)
	}
	return ts, nil
}

// fresh parses a signed timestamp and checks it against the tolerance in both directions.
func (v *Verifier) fresh(ts string, now time.Time) error {
	sec, err := parseUnix(ts)
	if err != nil {
		return err
	}
	if !signature.Fresh(sec, now, v.tolerance) {
		return fmt.Errorf("%w: signed at %d, now %d, tolerance %s", ErrStaleTimestamp, sec, now.Unix(), v.tolerance)
	}
	return nil
}

// parseUnix parses a timestamp header: decimal unix seconds.
func parseUnix(ts string) (int64, error) {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: timestamp %q is not unix seconds", ErrMalformed, clip(ts))
	}
	return sec, nil
}
