package webhook

import (
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// signatureHeaderNames are the headers that carry a signature, whose values a preview masks.
var signatureHeaderNames = []string{"Webhook-Signature", "X-Signature"}

// Preview returns the headers and the body of attempt (1-based) at m as Send would make them at
// time at, with each signature header's value replaced by mask: what a page may show of a
// request without what would let anyone forge one. The body is the payload uncompressed (a
// Content-Encoding header says when the relay compresses it). It sends nothing.
func (w *Destination) Preview(m *envelope.Message, attempt int, at time.Time, mask string) (http.Header, []byte) {
	h := http.Header{}
	sink := stdHead(h)
	if w.ce {
		w.eachCEHeader(m, attempt, at.Unix(), m.Payload, sink)
	} else {
		w.eachHeader(m, attempt, at.Unix(), m.Payload, sink)
	}
	for _, name := range signatureHeaderNames {
		if _, ok := h[name]; ok {
			h[name] = []string{mask}
		}
	}
	return h, append([]byte(nil), m.Payload...)
}
