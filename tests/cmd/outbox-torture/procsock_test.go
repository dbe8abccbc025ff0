package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// connOwner finds the process that owns a connection's client end: here this test's own
// process, whose client socket it opened; another pid owns nothing.
func TestConnOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp: the look-up works on Linux only")
	}
	if got := connOwner(server, map[int]int{os.Getpid(): 7}); got != 7 {
		t.Fatalf("owner %d, want 7 (this process)", got)
	}
	if got := connOwner(server, map[int]int{os.Getppid(): 3}); got != 0 {
		t.Fatalf("owner %d with only the parent process listed, want 0", got)
	}
}

// The evidence lists an aggregate's deliveries with the violation's event marked and the
// relay that sent each, and the faults and processes around it.
func TestEvidenceParts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	ds := []delivery{{ID: "e1", Seq: 1, At: t0, Relay: 1, Attempt: 1}, {ID: "e3", Seq: 3, At: t0.Add(time.Second), Relay: 2, Attempt: 1},
		{ID: "e2", Seq: 2, At: t0.Add(2 * time.Second), Attempt: 2}}
	f := focus{Endpoint: "ep-001", Aggregate: "order/1", Event: "e2", At: t0.Add(2 * time.Second)}
	var b strings.Builder
	writeAggDeliveries(&b, ds, f)
	writeFaultsAround(&b, []injected{{At: t0.Add(-time.Minute), What: "too early"}, {At: t0, What: "relay-kill"}},
		[]span{{What: "blackout of ep-001", ID: "ep-001", From: t0, To: t0.Add(3 * time.Second)},
			{What: "blackout of ep-002", ID: "ep-002", From: t0, To: t0.Add(3 * time.Second)}}, f)
	procs := []*relayProc{{id: 1, startedAt: t0.Add(-time.Hour), exitedAt: t0.Add(500 * time.Millisecond), done: closed()},
		{id: 2, startedAt: t0.Add(time.Second), done: make(chan struct{})}, {id: 3, startedAt: t0.Add(time.Minute), done: make(chan struct{})}}
	writeProcsAround(&b, procs, f.At)
	out := b.String()
	for _, want := range []string{"relay 1 e1 seq 1", "relay 2 e3 seq 3", "> 00:00:12.000000 relay ? e2 seq 2", "relay-kill",
		"blackout of ep-001", "relay 1 (relay-1.log): started", "exited 00:00:10.500000", "relay 2 (relay-2.log): started 00:00:11.000000; alive then"} {
		if !strings.Contains(out, want) {
			t.Errorf("evidence lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"too early", "ep-002", "relay 3"} {
		if strings.Contains(out, not) {
			t.Errorf("evidence has %q, outside the window or of another endpoint:\n%s", not, out)
		}
	}
}

func closed() chan struct{} { c := make(chan struct{}); close(c); return c }

// The evidence of a row left pending names the endpoints its commit routed it to and how.
func TestPendingEvidence(t *testing.T) {
	r := cleanEpRecord()
	var b strings.Builder
	rows := []pendingRow{{ID: "e2", Created: at(3.5), What: "e2 pending"}, {ID: "e7", Created: at(9), What: "e7 pending"}}
	writePendingEvidence(&b, rows, r.Deliveries, r.Txs, r.Timeline)
	out := b.String()
	for _, want := range []string{"## e2 pending", "ep-b relay 0", "  ep-b: required", "ep-b: 00:00:05.000000 disable state=disabled",
		"## e7 pending", "  ep-a: required"} {
		if !strings.Contains(out, want) {
			t.Errorf("pending evidence lacks %q:\n%s", want, out)
		}
	}
}
