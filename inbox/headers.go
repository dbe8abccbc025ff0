package inbox

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// maxEntries bounds the signatures read from one request; a rotation needs two or three.
const maxEntries = 32

// parseValues applies parse to each value of a repeated header and joins the results, at most
// maxEntries of them.
func parseValues(values []string, parse func(string) [][]byte) [][]byte {
	var out [][]byte
	for _, v := range values {
		out = append(out, parse(v)...)
	}
	if len(out) > maxEntries {
		out = out[:maxEntries]
	}
	return out
}

// parseXSignature returns the MACs in an X-Signature value: comma-separated entries
// "sha256=<hex>". Entries of another algorithm, or whose hex is not a SHA-256 MAC, are skipped
// (a newer sender may add algorithms); surrounding spaces are allowed.
func parseXSignature(v string) [][]byte {
	var out [][]byte
	for entry := range strings.SplitSeq(v, ",") {
		h, ok := strings.CutPrefix(strings.TrimSpace(entry), "sha256=")
		if !ok || len(h) != hex.EncodedLen(sha256.Size) {
			continue
		}
		if mac, err := hex.DecodeString(h); err == nil {
			out = append(out, mac)
		}
		if len(out) == maxEntries {
			break
		}
	}
	return out
}

// parseWebhookSignature returns the MACs in a webhook-signature value: space-separated entries
// "v1,<standard base64>". Other versions (the asymmetric "v1a") and entries that do not decode
// to a SHA-256 MAC are skipped.
func parseWebhookSignature(v string) [][]byte {
	var out [][]byte
	for entry := range strings.FieldsSeq(v) {
		b64, ok := strings.CutPrefix(entry, "v1,")
		if !ok || len(b64) != base64.StdEncoding.EncodedLen(sha256.Size) {
			continue
		}
		// 44 characters without padding decode to 33 bytes: check the decoded length too.
		if mac, err := base64.StdEncoding.DecodeString(b64); err == nil && len(mac) == sha256.Size {
			out = append(out, mac)
		}
		if len(out) == maxEntries {
			break
		}
	}
	return out
}
