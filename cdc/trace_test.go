package cdc

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// txTracer is a TxTracer of the test: it counts its calls and answers span.
type txTracer struct {
	calls int
	began time.Time
	span  string
}

func (r *txTracer) TraceTx(_ *Tx, began time.Time) string {
	r.calls++
	r.began = began
	return r.span
}

func tracedTx(n int) *Tx {
	tx := &Tx{CommitLSN: 0x1538A30}
	for range n {
		tx.Events = append(tx.Events, &envelope.Message{ID: "e"})
	}
	return tx
}

// With a tracer every event of a transaction carries its decode span; a transaction of
// control records alone is not traced (no event would carry it).
func TestTraceTxStampsEveryEvent(t *testing.T) {
	tr := &txTracer{span: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	s := NewStream(Config{Tracer: tr}, nil)
	began := time.Now()
	tx := tracedTx(3)
	s.traceTx(tx, began)
	if tr.calls != 1 || !tr.began.Equal(began) {
		t.Fatalf("tracer called %d times with began %v, want once with %v", tr.calls, tr.began, began)
	}
	for i, m := range tx.Events {
		if m.DecodeSpan != tr.span {
			t.Errorf("event %d carries %q, want the decode span", i, m.DecodeSpan)
		}
	}
	s.traceTx(&Tx{Controls: []Control{{}}}, began)
	if tr.calls != 1 {
		t.Errorf("a transaction without events was traced")
	}
}

// Without a tracer a transaction costs nothing: no allocation, nothing stamped.
func TestTraceTxOffCostsNothing(t *testing.T) {
	s := NewStream(Config{}, nil)
	tx := tracedTx(10)
	if n := testing.AllocsPerRun(100, func() { s.traceTx(tx, time.Time{}) }); n != 0 {
		t.Errorf("traceTx without a tracer allocates %v times per transaction", n)
	}
	for _, m := range tx.Events {
		if m.DecodeSpan != "" {
			t.Fatal("an event got a decode span without a tracer")
		}
	}
	// Positive control: with a tracer, the same measure sees its allocations.
	traced := NewStream(Config{Tracer: allocTracer{}}, nil)
	if n := testing.AllocsPerRun(100, func() { traced.traceTx(tx, time.Time{}) }); n == 0 {
		t.Error("the measure sees no allocation even with a tracer that allocates")
	}
}

type allocTracer struct{}

func (allocTracer) TraceTx(tx *Tx, _ time.Time) string {
	return string(append([]byte("00-"), tx.Events[0].ID...))
}
