package cdc

import (
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
)

func newTx(end pglogrepl.LSN, n int) *Tx {
	tx := &Tx{EndLSN: end}
	for i := 0; i < n; i++ {
		m := &envelope.Message{ID: "e", Payload: []byte("{}")}
		tx.Events = append(tx.Events, m)
		tx.bytes += size(m)
	}
	return tx
}

// ack settles the i-th event of tx.
func ack(tr *Tracker, tx *Tx, i int) { tr.Ack(tx, tx.Events[i]) }

func TestTrackerConfirmsOnlyAContiguousDeliveredPrefix(t *testing.T) {
	tr := NewTracker(1000, 1<<20)
	a, b, c := newTx(100, 2), newTx(200, 1), newTx(300, 1)
	tr.Add(a)
	tr.Add(b)
	tr.Add(c)
	steps := []struct {
		tx   *Tx
		i    int
		want pglogrepl.LSN
	}{
		{c, 0, 0},   // a later transaction done first: nothing confirmable
		{a, 1, 0},   // a has one event left
		{b, 0, 0},   // b done, but a still pins
		{a, 0, 300}, // a done: a, b, c pop together
	}
	for i, s := range steps {
		ack(tr, s.tx, s.i)
		if got := tr.Confirmable(); got != s.want {
			t.Fatalf("step %d: confirmable %s, want %s", i, got, s.want)
		}
	}
	if tr.Outstanding() != 0 {
		t.Fatalf("outstanding %d", tr.Outstanding())
	}
	if ev, by := tr.Buffered(); ev != 0 || by != 0 {
		t.Fatalf("buffered %d events %d bytes after all acks", ev, by)
	}
}

func TestTrackerEmptyTransactionConfirmsAtOnceWhenNothingPrecedes(t *testing.T) {
	tr := NewTracker(10, 1<<20)
	tr.Add(newTx(50, 0))
	if tr.Confirmable() != 50 {
		t.Fatalf("confirmable %s", tr.Confirmable())
	}
	a := newTx(60, 1)
	tr.Add(a)
	tr.Add(newTx(70, 0)) // must wait behind a
	if tr.Confirmable() != 50 {
		t.Fatalf("empty tx confirmed ahead of an undelivered one: %s", tr.Confirmable())
	}
	ack(tr, a, 0)
	if tr.Confirmable() != 70 {
		t.Fatalf("confirmable %s, want 70", tr.Confirmable())
	}
}

func TestTrackerAdvanceIfIdle(t *testing.T) {
	tr := NewTracker(10, 1<<20)
	if !tr.AdvanceIfIdle(500) || tr.Confirmable() != 500 {
		t.Fatal("idle tracker did not take the keepalive position")
	}
	if tr.AdvanceIfIdle(400) {
		t.Fatal("confirmable moved backwards")
	}
	a := newTx(600, 1)
	tr.Add(a)
	if tr.AdvanceIfIdle(900) {
		t.Fatal("advanced past an undelivered transaction")
	}
	ack(tr, a, 0)
	if !tr.AdvanceIfIdle(900) || tr.Confirmable() != 900 {
		t.Fatalf("confirmable %s", tr.Confirmable())
	}
}

func TestTrackerFullByCountAndBytes(t *testing.T) {
	tr := NewTracker(2, 1<<20)
	a := newTx(1, 2)
	tr.Add(a)
	if !tr.Full() {
		t.Fatal("2 events in a 2-event buffer is not full")
	}
	ack(tr, a, 0)
	if tr.Full() {
		t.Fatal("still full after an ack")
	}
	select {
	case <-tr.Wake():
	default:
		t.Fatal("no wake-up after freeing space")
	}
	big := NewTracker(100, 10)
	big.Add(newTx(2, 1))
	if !big.Full() {
		t.Fatal("byte limit ignored")
	}
}

func TestTrackerCompactsLongQueues(t *testing.T) {
	tr := NewTracker(1<<20, 1<<30)
	var txs []*Tx
	for i := 1; i <= 5000; i++ {
		tx := newTx(pglogrepl.LSN(i), 1)
		txs = append(txs, tx)
		tr.Add(tx)
	}
	for i, tx := range txs[:4999] {
		ack(tr, tx, 0)
		if tr.Confirmable() != pglogrepl.LSN(i+1) {
			t.Fatalf("after %d acks confirmable %s", i+1, tr.Confirmable())
		}
	}
	if tr.Outstanding() != 1 || len(tr.fifo) > 4000 {
		t.Fatalf("outstanding %d, fifo len %d", tr.Outstanding(), len(tr.fifo))
	}
}
