package cdc

import "time"

// TxTracer records the decode of each transaction a Stream hands on, as a span: the relay sets
// one up from its OpenTelemetry TracerProvider (relay.Config.TracerProvider; its
// implementation is internal/tracing's), so that this package links no tracing library. Nil in
// Config: nothing is traced, and decoding pays one nil check per transaction.
type TxTracer interface {
	// TraceTx records the decode of tx (its events and controls decoded, its Sequence and
	// CommitTime set), from began, when its BEGIN was read, to now, when its COMMIT was. It
	// returns the W3C traceparent of the span it recorded, which the stream gives each of tx's
	// events as envelope.Message.DecodeSpan before handing tx on; "" gives them none. It is
	// called from the stream's goroutine only, and must not keep tx.
	TraceTx(tx *Tx, began time.Time) string
}

// traceTx records tx's decode with the configured TxTracer, if any, and stamps its span on
// tx's events, which no other goroutine sees yet.
func (s *Stream) traceTx(tx *Tx, began time.Time) {
	if s.cfg.Tracer == nil || len(tx.Events) == 0 {
		return
	}
	tp := s.cfg.Tracer.TraceTx(tx, began)
	for _, m := range tx.Events {
		m.DecodeSpan = tp
	}
}
