package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

// captured is one request as the relay sent it.
type captured struct {
	header http.Header
	body   []byte
}

// capture starts a receiver that verifies the signature over the exact body and keeps every
// request.
func capture(t *testing.T) (*httptest.Server, <-chan captured) {
	t.Helper()
	ch := make(chan captured, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !signature.VerifyX([][]byte{[]byte(secret)}, r.Header.Get("X-Timestamp"), body, r.Header.Values("X-Signature")...) {
			t.Errorf("signature does not verify over the body")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ch <- captured{r.Header.Clone(), body}
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// sdkRequest rebuilds the captured request for the SDK's reader.
func (c captured) sdkRequest(t *testing.T) *http.Request {
	req, err := http.NewRequest(http.MethodPost, "http://x/", bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = c.header
	return req
}

type ceWant struct {
	id, typ, aggType, aggID, trace string
	payload                        string
	created                        time.Time
}

func enqueueCE(t *testing.T, e *env, n int) []ceWant {
	t.Helper()
	var out []ceWant
	for i := 1; i <= n; i++ {
		tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		id, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: "a/1",
			EventType: "order.changed", Payload: map[string]int{"seq": i}, TraceParent: tp})
		if err != nil {
			t.Fatal(err)
		}
		w := ceWant{id: id.String(), typ: "order.changed", aggType: "order", aggID: "a/1", trace: tp}
		if err := e.pool.QueryRow(context.Background(), `SELECT payload::text, created_at FROM outbox_events WHERE id = $1`, id).
			Scan(&w.payload, &w.created); err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// checkCE compares an event the SDK decoded with the row it came from, attribute by attribute.
func checkCE(t *testing.T, got sdk.Event, w ceWant, source string) string {
	t.Helper()
	if err := got.Validate(); err != nil {
		t.Fatalf("invalid CloudEvent: %v", err)
	}
	if got.SpecVersion() != "1.0" || got.ID() != w.id || got.Source() != source || got.Type() != w.typ ||
		got.Subject() != w.aggType+"/"+w.aggID || !got.Time().Equal(w.created) || got.DataContentType() != "application/json" {
		t.Fatalf("attributes %s; want id %s source %s type %s subject %s/%s time %s", got, w.id, source, w.typ,
			w.aggType, w.aggID, w.created)
	}
	var gotData, wantData any
	if json.Unmarshal(got.Data(), &gotData) != nil || json.Unmarshal([]byte(w.payload), &wantData) != nil ||
		!jsonEqual(gotData, wantData) {
		t.Fatalf("data %s, want %s", got.Data(), w.payload)
	}
	ext := got.Extensions()
	if ext["aggregatetype"] != w.aggType || ext["aggregateid"] != w.aggID {
		t.Fatalf("extensions %v", ext)
	}
	seq, _ := ext["sequence"].(string)
	if len(seq) != 25 || seq[16] != '-' {
		t.Fatalf("sequence %q is not the X-Event-Sequence form", seq)
	}
	return seq
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// --format cloudevents sends binary mode: the CloudEvents Go SDK, an independent reader, decodes
// every attribute from the relay's real requests, and the trace context rides along.
func TestCloudEventsBinaryModeReadsWithTheSDK(t *testing.T) {
	e := newEnv(t)
	srv, ch := capture(t)
	e.webhookProcess(srv.URL, "--format", "cloudevents")
	want := enqueueCE(t, e, 2)
	prev := ""
	for _, w := range want {
		var c captured
		select {
		case c = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("no request")
		}
		if !strings.HasPrefix(c.header.Get("Content-Type"), "application/json") || c.header.Get("Ce-Specversion") != "1.0" {
			t.Fatalf("not binary mode: %v", c.header)
		}
		if string(c.body) != w.payload {
			t.Fatalf("body %s, want the payload %s", c.body, w.payload)
		}
		got, err := cehttp.NewEventFromHTTPRequest(c.sdkRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		seq := checkCE(t, *got, w, "/outbox-relay/default" /* the pipeline's name */)
		if seq <= prev {
			t.Fatalf("sequence %q does not rise after %q", seq, prev)
		}
		prev = seq
		if c.header.Get("Traceparent") != w.trace {
			t.Fatalf("traceparent %q, want %q", c.header.Get("Traceparent"), w.trace)
		}
	}
}

// A batch is CloudEvents batch mode: the SDK decodes the array, every attribute matches, and
// the events are in commit order.
func TestCloudEventsBatchModeReadsWithTheSDK(t *testing.T) {
	e := newEnv(t)
	srv, ch := capture(t)
	e.webhookProcess(srv.URL, "--source", "urn:test", "--batch-max-events", "10", "--batch-linger", "50ms")
	want := enqueueCE(t, e, 5)
	var got []sdk.Event
	for len(got) < len(want) {
		var c captured
		select {
		case c = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d events arrived", len(got))
		}
		if !cehttp.IsHTTPBatch(c.header) {
			t.Fatalf("not a batch: %v", c.header)
		}
		evs, err := cehttp.NewEventsFromHTTPRequest(c.sdkRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, evs...)
	}
	prev := ""
	for i, w := range want {
		seq := checkCE(t, got[i], w, "urn:test")
		if seq <= prev {
			t.Fatalf("sequence %q does not rise after %q", seq, prev)
		}
		prev = seq
		if got[i].Extensions()["traceparent"] != w.trace {
			t.Fatalf("traceparent extension %v, want %q", got[i].Extensions()["traceparent"], w.trace)
		}
	}
}
