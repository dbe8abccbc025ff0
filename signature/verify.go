package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"
)

// Header names of the contract, in canonical form (http.Header.Get matches any case).
const (
	HeaderXSignature       = "X-Signature"
	HeaderXTimestamp       = "X-Timestamp"
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// DefaultTolerance is how far a signed timestamp may be from now, either way, for Fresh with a
// zero tolerance. It matches the Standard Webhooks reference libraries.
const DefaultTolerance = 5 * time.Minute

// MaxEntries bounds the signatures read from one request; a rotation needs two or three.
const MaxEntries = 32

// ParseX returns the MACs in the values of an X-Signature header: comma-separated entries
// "sha256=<hex>", surrounding spaces allowed, at most MaxEntries in all. Entries of another
// algorithm, or whose hex is not a SHA-256 MAC, are skipped: a newer sender may add algorithms.
func ParseX(values ...string) [][]byte {
	var out [][]byte
	for _, v := range values {
		for entry := range strings.SplitSeq(v, ",") {
			if len(out) == MaxEntries {
				return out
			}
			h, ok := strings.CutPrefix(strings.TrimSpace(entry), "sha256=")
			if !ok || len(h) != hex.EncodedLen(sha256.Size) {
				continue
			}
			if mac, err := hex.DecodeString(h); err == nil {
				out = append(out, mac)
			}
		}
	}
	return out
}

// ParseStandard returns the MACs in the values of a webhook-signature header: space-separated
// entries "v1,<standard base64>", at most MaxEntries in all. Other versions (the asymmetric
// "v1a") and entries that do not decode to a SHA-256 MAC are skipped.
func ParseStandard(values ...string) [][]byte {
	var out [][]byte
	for _, v := range values {
		for entry := range strings.FieldsSeq(v) {
			if len(out) == MaxEntries {
				return out
			}
			b64, ok := strings.CutPrefix(entry, "v1,")
			if !ok || len(b64) != base64.StdEncoding.EncodedLen(sha256.Size) {
				continue
			}
			// 44 characters without padding decode to 33 bytes: check the decoded length too.
			if mac, err := base64.StdEncoding.DecodeString(b64); err == nil && len(mac) == sha256.Size {
				out = append(out, mac)
			}
		}
	}
	return out
}

// VerifyX reports whether any entry of the X-Signature header values is the MAC, under any of
// keys, of timestamp (the X-Timestamp header exactly as received) followed by body. It does not
// check the timestamp's age: see Fresh.
func VerifyX(keys [][]byte, timestamp string, body []byte, values ...string) bool {
	want := make([][]byte, len(keys))
	for i, k := range keys {
		want[i] = MAC(k, []byte(timestamp), body)
	}
	return anyEqual(want, ParseX(values...))
}

// VerifyStandard reports whether any entry of the webhook-signature header values is the MAC,
// under any of keys (decoded whsec_ secrets), of "<id>.<timestamp>.<body>", where id and
// timestamp are the webhook-id and webhook-timestamp headers exactly as received. It does not
// check the timestamp's age: see Fresh.
func VerifyStandard(keys [][]byte, id, timestamp string, body []byte, values ...string) bool {
	prefix := []byte(id + "." + timestamp + ".")
	want := make([][]byte, len(keys))
	for i, k := range keys {
		want[i] = MAC(k, prefix, body)
	}
	return anyEqual(want, ParseStandard(values...))
}

// Fresh reports whether a signed timestamp, in unix seconds, is within tolerance of now, in the
// past or in the future, both ends included. A tolerance of zero or less means
// DefaultTolerance; it counts in whole seconds.
func Fresh(signed int64, now time.Time, tolerance time.Duration) bool {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	tol := int64(tolerance / time.Second)
	// Only now and tol take part in the arithmetic: signed comes from outside and may be near the
	// int64 limits, while now.Unix() is not and tol is at most ~2^33.
	lo, hi := now.Unix()-tol, now.Unix()+tol
	return lo <= signed && signed <= hi
}

// anyEqual reports whether any received MAC equals any expected one, comparing every pair in
// constant time.
func anyEqual(want, got [][]byte) bool {
	ok := false
	for _, g := range got {
		for _, w := range want {
			// No early exit: the time taken does not depend on which pair matched.
			if hmac.Equal(g, w) {
				ok = true
			}
		}
	}
	return ok
}
