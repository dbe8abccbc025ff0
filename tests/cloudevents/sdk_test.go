// Package cloudevents reads what package cloudevents writes with the CloudEvents Go SDK, an
// independent reader; the SDK is a dependency of this tests module only.
package cloudevents_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	sdk "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/cloudevents"
)

func sample(i int) cloudevents.Event {
	return cloudevents.Event{
		ID:            uuid.NewString(),
		Source:        cloudevents.DefaultSource("orders"),
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   "42-" + string(rune('a'+i)),
		Time:          time.Date(2026, 11, 30, 19, 40, 0, 123456000+i*1000, time.UTC),
		Sequence:      "0000000001538A30-0000000" + string(rune('0'+i)),
		TraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:    "congo=t61rcWkgMzE",
		Data:          []byte(`{"order_id": 42, "n": ` + string(rune('0'+i)) + `}`),
	}
}

// checkSDK compares an event as the CloudEvents Go SDK read it with the one encoded, attribute
// by attribute. traceparent/tracestate are extensions in structured mode only (binary mode
// carries them as W3C headers, which the SDK's binary reader does not map).
func checkSDK(t *testing.T, got *sdk.Event, want *cloudevents.Event, structured bool) {
	t.Helper()
	if err := got.Validate(); err != nil {
		t.Errorf("SDK says the event is invalid: %v", err)
	}
	eq := func(name, g, w string) {
		t.Helper()
		if g != w {
			t.Errorf("%s = %q, want %q", name, g, w)
		}
	}
	eq("specversion", got.SpecVersion(), "1.0")
	eq("id", got.ID(), want.ID)
	eq("source", got.Source(), want.Source)
	eq("type", got.Type(), want.Type)
	eq("subject", got.Subject(), want.AggregateType+"/"+want.AggregateID)
	eq("datacontenttype", got.DataContentType(), "application/json")
	if !got.Time().Equal(want.Time) {
		t.Errorf("time = %s, want %s", got.Time(), want.Time)
	}
	ext := got.Extensions()
	wantExt := map[string]string{"aggregatetype": want.AggregateType, "aggregateid": want.AggregateID,
		"sequence": want.Sequence}
	if structured {
		wantExt["traceparent"] = want.TraceParent
		wantExt["tracestate"] = want.TraceState
	}
	for k, w := range wantExt {
		g, _ := ext[k].(string)
		eq("extension "+k, g, w)
	}
	if len(ext) != len(wantExt) {
		t.Errorf("extensions = %v, want exactly %v", ext, wantExt)
	}
	if !bytes.Equal(got.Data(), want.Data) {
		t.Errorf("data = %s, want %s", got.Data(), want.Data)
	}
}

func TestBinaryModeReadBySDK(t *testing.T) {
	e := sample(0)
	req, _ := http.NewRequest(http.MethodPost, "http://localhost/", bytes.NewReader(e.Data))
	if err := cloudevents.BinaryHeaders(&e, req.Header.Add); err != nil {
		t.Fatal(err)
	}
	got, err := cehttp.NewEventFromHTTPRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	checkSDK(t, got, &e, false)
	if req.Header.Get("traceparent") != e.TraceParent || req.Header.Get("tracestate") != e.TraceState {
		t.Errorf("trace headers = %q %q", req.Header.Get("traceparent"), req.Header.Get("tracestate"))
	}
	if n := len(req.Header["Content-Type"]); n != 1 {
		t.Errorf("%d Content-Type headers", n)
	}
}

func TestBatchModeReadBySDK(t *testing.T) {
	events := []cloudevents.Event{sample(0), sample(1), sample(2)}
	body, err := cloudevents.AppendBatch(nil, events)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(body) {
		t.Fatalf("invalid JSON: %s", body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://localhost/", bytes.NewReader(body))
	req.Header.Set("Content-Type", cloudevents.ContentTypeBatch)
	if !cehttp.IsHTTPBatch(req.Header) {
		t.Fatal("SDK does not see a batch")
	}
	got, err := cehttp.NewEventsFromHTTPRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(events) {
		t.Fatalf("SDK read %d events, want %d", len(got), len(events))
	}
	for i := range got {
		checkSDK(t, &got[i], &events[i], true)
	}
}
