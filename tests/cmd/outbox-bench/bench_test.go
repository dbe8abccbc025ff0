package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMain lets the test binary stand in for outbox-bench when the suite starts its receiver
// (`<self> receiver ...`), as the real binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "receiver" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSuiteSmall runs every row at a tiny size, so `make test` keeps the bench working: every
// row must finish with all events delivered, signed and in order, and the report must show
// every row and every target.
func TestSuiteSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, builds the relay and runs every row: skipped with -short")
	}
	pgtest.Long(t) // about two minutes
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	// The isolation row at its shortest (two runs of 20s) and a light load; the fan-out rows at
	// their smallest with a failing and a slow endpoint (N=100), about 30s in all.
	res, err := runSuite(ctx, config{Events: 2000, Steady: time.Second, IsolationRate: 200, IsolationDuration: 20 * time.Second,
		FanoutN: []int{1, 100}, FanoutF: []int{1, 10}}, &progress)
	if err != nil {
		t.Fatalf("suite: %v\nprogress:\n%s", err, progress.String())
	}
	for _, name := range res.errOrder {
		t.Errorf("row %q failed: %v", name, res.errs[name])
	}
	if res.drain != nil && res.drain.Stats.Unique != 2000 {
		t.Errorf("drain: receiver has %d distinct events, want 2000", res.drain.Stats.Unique)
	}
	if res.resources != nil && res.resources.Events != 6000 {
		t.Errorf("resources row drained %d events, want 3 × 2000", res.resources.Events)
	}
	var out bytes.Buffer
	writeReport(&out, res)
	report := out.String()
	names := []string{rowDrain, rowCeilingLean, rowCeilingStd, rowRaw, rowSteady1k, rowSteady5k, rowResources, rowTwoPipes}
	for _, a := range sweepAggregates {
		names = append(names, sweepRow(a))
	}
	for _, c := range endpointCases {
		names = append(names, c.row)
	}
	names = append(names, rowBurst, rowFanoutCeiling)
	for _, c := range res.cfg.fanoutCases() {
		names = append(names, c.row())
		if d := res.fanout[c.row()]; d != nil && c.N == 100 && !c.NoFaults && (d.Account.Routed == 0 || d.Routed.ByKind[slow] == 0) {
			t.Errorf("%s: %d events routed to the failing endpoint, %d deliveries to the slow one; want some of each", c.row(),
				d.Account.Routed, d.Routed.ByKind[slow])
		}
	}
	for _, name := range names {
		if !strings.Contains(report, "| "+name+" | ") {
			t.Errorf("report has no row %q", name)
		}
	}
	if strings.Contains(report, "FAILED") {
		t.Errorf("report shows a failed row")
	}
	for _, target := range []string{"× HTTP ceiling", "p99 < 5ms", "relay CPU-s per 100k", "peak RSS < 100 MB",
		"× the 1-endpoint row's", "at 1,000 endpoints", "× the HTTP ceiling, healthy deliveries/s (issue 40)",
		"relay CPU per delivery at N=100, F=10", "PostgreSQL CPU per delivery at N=100, F=10", "relay peak RSS < 150.0 MB at N=100",
		"the same rate with no failing or slow endpoint (issue 40)"} {
		if !strings.Contains(report, target) {
			t.Errorf("report has no target line %q", target)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s\nprogress:\n%s", report, progress.String())
	}
}

// TestCeilingRequestsVerify checks that both ceiling clients send what the receiver accepts:
// signed like the relay, with the event id and aggregate it records.
func TestCeilingRequestsVerify(t *testing.T) {
	recv := newReceiver(benchSecret)
	srv := httptest.NewServer(recv.handler())
	defer srv.Close()
	s := signer{keys: [][]byte{[]byte(benchSecret)}}
	reqs := []request{
		{ID: "a1", AggregateType: "order", AggregateID: "7", EventType: "order.created", Body: []byte(`{"pad": "xx", "seq": 1}`)},
		{ID: "a2", AggregateType: "order", AggregateID: "7", EventType: "order.created", Body: []byte(`{"pad": "xx", "seq": 2}`)},
	}
	clients := map[string]func() (poster, error){
		"lean": func() (poster, error) { return newLeanPoster(srv.URL+"/hook", s) },
		"net/http": func() (poster, error) {
			return &stdPoster{url: srv.URL + "/hook", client: newStdClient(1), signer: s}, nil
		},
	}
	for name, newPoster := range clients {
		t.Run(name, func(t *testing.T) {
			recv.reset()
			if _, err := runCeiling(context.Background(), reqs, 1, newPoster); err != nil {
				t.Fatal(err)
			}
			st := recv.snapshot()
			if st.Unique != 2 || st.BadSignatures != 0 || st.OrderViolations != 0 || st.Duplicates != 0 {
				t.Fatalf("receiver stats %+v, want 2 distinct events and nothing wrong", st)
			}
			if st.BodyBytes != int64(len(reqs[0].Body)+len(reqs[1].Body)) {
				t.Fatalf("receiver counted %d body bytes, want %d", st.BodyBytes, len(reqs[0].Body)+len(reqs[1].Body))
			}
		})
	}
}

// TestReceiverRejectsAndCounts checks that a bad signature is refused and that duplicates and
// out-of-order first deliveries are counted, since the suite's checks rely on them.
func TestReceiverRejectsAndCounts(t *testing.T) {
	recv := newReceiver(benchSecret)
	srv := httptest.NewServer(recv.handler())
	defer srv.Close()
	wrong := signer{keys: [][]byte{[]byte("not-the-secret")}}
	good := signer{keys: [][]byte{[]byte(benchSecret)}}
	ev := func(id string, seq string) request {
		return request{ID: id, AggregateType: "order", AggregateID: "1", EventType: "e", Body: []byte(`{"seq": ` + seq + `}`)}
	}
	if _, err := runCeiling(context.Background(), []request{ev("x", "1")}, 1, func() (poster, error) {
		return newLeanPoster(srv.URL+"/hook", wrong)
	}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("badly signed request: err %v, want a 401", err)
	}
	seq := []request{ev("b", "5"), ev("b", "5"), ev("c", "3")}
	if _, err := runCeiling(context.Background(), seq, 1, func() (poster, error) {
		return newLeanPoster(srv.URL+"/hook", good)
	}); err != nil {
		t.Fatal(err)
	}
	st := recv.snapshot()
	if st.BadSignatures != 1 || st.Duplicates != 1 || st.OrderViolations != 1 || st.Unique != 2 {
		t.Fatalf("stats %+v; want 1 bad signature, 1 duplicate, 1 order violation, 2 distinct", st)
	}
}
