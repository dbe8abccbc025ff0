package webhook

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/outbox-relay/outbox-relay/cloudevents"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"
)

// ceEvent is m as the CloudEvents wire package sees it.
func (w *Destination) ceEvent(m *envelope.Message) cloudevents.Event {
	tp, ts := traceContext(m.Headers)
	return cloudevents.Event{ID: m.ID, Source: w.source, Type: m.EventType, AggregateType: m.AggregateType,
		AggregateID: m.AggregateID, Time: m.CreatedAt, Sequence: m.Sequence, TraceParent: tp, TraceState: ts,
		Data: m.Payload}
}

// traceContext returns the traceparent and tracestate entries of a row's headers column.
func traceContext(raw []byte) (tp, ts string) {
	if len(raw) == 0 {
		return "", ""
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return "", ""
	}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			continue
		}
		switch strings.ToLower(k) {
		case "traceparent":
			tp = s
		case "tracestate":
			ts = s
		}
	}
	return tp, ts
}

// eachCEHeader passes the headers of a CloudEvents binary-mode request: the ce- attributes and
// trace context, the signature over body, and the row's forwarded X-* headers.
func (w *Destination) eachCEHeader(m *envelope.Message, attempt int, ts int64, body []byte, h headerSink) {
	e := w.ceEvent(m)
	// The id, source and type are never empty here (the stream rejects rows without them), so
	// this cannot fail; if it did, the request would go without ce- headers and fail visibly.
	_ = cloudevents.BinaryHeaders(&e, h.add)
	var num [20]byte
	h.addBytes("X-Attempt", strconv.AppendInt(num[:0], int64(attempt), 10))
	w.signatureHeaders(m.ID, ts, body, h)
	if len(m.Headers) > 0 {
		envelope.ForwardHeaders(m.Headers, func(k, v string) {
			if l := strings.ToLower(k); l != "traceparent" && l != "tracestate" {
				h.add(k, v)
			}
		})
	}
}

// appendBatch appends the CloudEvents batch body of ms to dst.
func (w *Destination) appendBatch(dst []byte, ms []*envelope.Message) ([]byte, error) {
	ces := make([]cloudevents.Event, len(ms))
	for i, m := range ms {
		ces[i] = w.ceEvent(m)
	}
	return cloudevents.AppendBatch(dst, ces)
}

// eachBatchHeader passes the headers of a batch request. Under Standard Webhooks its
// webhook-id is derived from the events' ids (cloudevents.BatchID), so a batch retried as
// formed carries the same id on every attempt.
func (w *Destination) eachBatchHeader(ms []*envelope.Message, attempt int, ts int64, body []byte, h headerSink) {
	h.add("Content-Type", cloudevents.ContentTypeBatch)
	var num [20]byte
	h.addBytes("X-Attempt", strconv.AppendInt(num[:0], int64(attempt), 10))
	id := ""
	if w.scheme == signature.StandardWebhooks {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		id = cloudevents.BatchID(ids)
	}
	w.signatureHeaders(id, ts, body, h)
}

// signatureHeaders passes User-Agent, the signature headers over body (id is the Standard
// Webhooks webhook-id) and Content-Encoding.
func (w *Destination) signatureHeaders(id string, ts int64, body []byte, h headerSink) {
	if w.ua != "" {
		h.add("User-Agent", w.ua)
	}
	var num [20]byte
	tsText := strconv.AppendInt(num[:0], ts, 10)
	var sig [160]byte
	if w.scheme == signature.StandardWebhooks {
		h.add("Webhook-Id", envelope.HeaderValue(id))
		h.addBytes("Webhook-Timestamp", tsText)
		h.addBytes("Webhook-Signature", w.signer.AppendStandard(sig[:0], id, ts, body))
	} else {
		h.addBytes("X-Timestamp", tsText)
		h.addBytes("X-Signature", w.signer.AppendX(sig[:0], ts, body))
	}
	if w.gzip {
		h.add("Content-Encoding", "gzip")
	}
}

// bodyBuf holds a request body being built and its compressed form, reused across requests.
type bodyBuf struct {
	plain []byte
	zbuf  bytes.Buffer
	zw    *gzip.Writer
}

var bodies = sync.Pool{New: func() any { return &bodyBuf{} }}

func getBody() *bodyBuf { return bodies.Get().(*bodyBuf) }

func putBody(b *bodyBuf) {
	if cap(b.plain) > 4<<20 {
		b.plain = nil
	}
	if b.zbuf.Cap() > 4<<20 {
		b.zbuf = bytes.Buffer{}
	}
	bodies.Put(b)
}

// gzip returns p compressed; the result is valid until the buffer is reused.
func (b *bodyBuf) gzip(p []byte) []byte {
	b.zbuf.Reset()
	if b.zw == nil {
		b.zw, _ = gzip.NewWriterLevel(&b.zbuf, gzip.BestSpeed)
	} else {
		b.zw.Reset(&b.zbuf)
	}
	_, _ = b.zw.Write(p)
	_ = b.zw.Close()
	return b.zbuf.Bytes()
}
