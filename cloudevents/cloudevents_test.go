package cloudevents_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestRoundTrip checks that this package's parsers read back exactly what its encoders write,
// including values that binary mode must percent-encode and that JSON must escape.
func TestRoundTrip(t *testing.T) {
	odd := sample(3)
	odd.AggregateType = `tenant "a" 100%`
	odd.AggregateID = "Zürich\r\nX-Injected: 1\x00\x7f"
	odd.Type = "ordre.créé"
	odd.Source = "urn:x y"
	odd.TraceState = ""
	odd.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for _, e := range []cloudevents.Event{sample(0), odd} {
		h := http.Header{}
		if err := cloudevents.BinaryHeaders(&e, h.Add); err != nil {
			t.Fatal(err)
		}
		for k, vs := range h {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00 ") {
					t.Errorf("header %s value %q is not safe on the wire", k, v)
				}
			}
		}
		if !cloudevents.IsBinary(h) || cloudevents.IsBatch(h) {
			t.Error("IsBinary/IsBatch wrong for binary mode")
		}
		got, err := cloudevents.ParseBinary(h, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		same(t, got, e)

		body, err := cloudevents.AppendBatch([]byte("keep"), []cloudevents.Event{e, e})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(body, []byte("keep[")) {
			t.Fatalf("AppendBatch did not append: %s", body)
		}
		evs, err := cloudevents.ParseBatch(body[4:])
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 {
			t.Fatalf("%d events", len(evs))
		}
		same(t, evs[1], e)
	}
}

func same(t *testing.T, got, want cloudevents.Event) {
	t.Helper()
	if !got.Time.Equal(want.Time) {
		t.Errorf("time %s, want %s", got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	gd, wd := got.Data, want.Data
	got.Data, want.Data = nil, nil
	if !equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if !bytes.Equal(gd, wd) {
		t.Errorf("data %s, want %s", gd, wd)
	}
}

func equal(a, b cloudevents.Event) bool {
	return a.ID == b.ID && a.Source == b.Source && a.Type == b.Type && a.AggregateType == b.AggregateType &&
		a.AggregateID == b.AggregateID && a.Sequence == b.Sequence && a.TraceParent == b.TraceParent &&
		a.TraceState == b.TraceState
}

func TestEncodeRefusesBadInput(t *testing.T) {
	for name, mut := range map[string]func(*cloudevents.Event){
		"no id":     func(e *cloudevents.Event) { e.ID = "" },
		"no source": func(e *cloudevents.Event) { e.Source = "" },
		"no type":   func(e *cloudevents.Event) { e.Type = "" },
	} {
		e := sample(0)
		mut(&e)
		added := 0
		if err := cloudevents.BinaryHeaders(&e, func(string, string) { added++ }); !errors.Is(err, cloudevents.ErrInvalid) || added != 0 {
			t.Errorf("%s: BinaryHeaders err %v, %d headers added", name, err, added)
		}
		if out, err := cloudevents.AppendBatch([]byte("x"), []cloudevents.Event{sample(1), e}); !errors.Is(err, cloudevents.ErrInvalid) || string(out) != "x" {
			t.Errorf("%s: AppendBatch err %v, out %q", name, err, out)
		}
	}
	e := sample(0)
	e.Data = []byte(`{"a":`)
	if _, err := cloudevents.AppendBatch(nil, []cloudevents.Event{e}); !errors.Is(err, cloudevents.ErrInvalid) || !strings.Contains(err.Error(), e.ID) {
		t.Errorf("invalid data: %v", err)
	}
	e.Data = nil
	body, err := cloudevents.AppendBatch(nil, []cloudevents.Event{e})
	if err != nil || bytes.Contains(body, []byte(`"data"`)) {
		t.Errorf("empty data: %s %v", body, err)
	}
	if body, err := cloudevents.AppendBatch(nil, nil); err != nil || string(body) != "[]" {
		t.Errorf("empty batch: %s %v", body, err)
	}
}

func TestParseRefusesBadInput(t *testing.T) {
	ok := `"specversion":"1.0","id":"a","source":"s","type":"t"`
	for _, body := range []string{
		``, `{}`, `[1]`, `[null]`, `[{}]`, `{` + ok + `}`,
		`[{"specversion":"0.3","id":"a","source":"s","type":"t"}]`,
		`[{"specversion":"1.0","source":"s","type":"t"}]`,
		`[{"specversion":"1.0","id":"a","type":"t"}]`,
		`[{"specversion":"1.0","id":"a","source":"s"}]`,
		`[{` + ok + `,"id":5}]`,
		`[{` + ok + `,"time":"yesterday"}]`,
		`[{` + ok + `,"sequence":7}]`,
		`[{` + ok + `,"datacontenttype":"text/plain","data":"x"}]`,
		`[{` + ok + `,"data_base64":"e30="}]`,
	} {
		if _, err := cloudevents.ParseBatch([]byte(body)); !errors.Is(err, cloudevents.ErrInvalid) {
			t.Errorf("ParseBatch(%s) = %v, want ErrInvalid", body, err)
		}
	}
	if evs, err := cloudevents.ParseBatch([]byte(`[{` + ok + `,"datacontenttype":"application/vnd.x+json; charset=utf-8","data":[1]}]`)); err != nil || string(evs[0].Data) != "[1]" {
		t.Errorf("+json data: %v %v", evs, err)
	}
	h := http.Header{}
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", "a")
	h.Set("Ce-Source", "s")
	if _, err := cloudevents.ParseBinary(h, nil); !errors.Is(err, cloudevents.ErrInvalid) {
		t.Errorf("no type: %v", err)
	}
	h.Set("Ce-Type", "t")
	h.Set("Ce-Time", "noon")
	if _, err := cloudevents.ParseBinary(h, nil); !errors.Is(err, cloudevents.ErrInvalid) {
		t.Errorf("bad time: %v", err)
	}
	h.Del("Ce-Time")
	h.Set("Ce-Specversion", "0.3")
	if _, err := cloudevents.ParseBinary(h, nil); !errors.Is(err, cloudevents.ErrInvalid) {
		t.Errorf("0.3: %v", err)
	}
}

func TestIsBatch(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/cloudevents-batch+json":                true,
		"Application/CloudEvents-Batch+JSON; charset=utf-8": true,
		"application/json":                                  false,
		"application/cloudevents+json":                      false,
		"":                                                  false,
	} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		if got := cloudevents.IsBatch(h); got != want {
			t.Errorf("IsBatch(%q) = %v", ct, got)
		}
	}
}

func TestBatchID(t *testing.T) {
	a, b := uuid.NewString(), uuid.NewString()
	id := cloudevents.BatchID([]string{a, b})
	if id != cloudevents.BatchID([]string{a, b}) {
		t.Fatal("BatchID is not stable")
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 5 {
		t.Fatalf("BatchID %q is not a version 5 uuid: %v", id, err)
	}
	for _, other := range [][]string{{b, a}, {a}, {a, b, a}} {
		if cloudevents.BatchID(other) == id {
			t.Errorf("BatchID(%q) = BatchID(%q)", other, []string{a, b})
		}
	}
	if cloudevents.BatchID([]string{a}) == a {
		t.Error("a batch of one has its event's id")
	}
	// Known answer: anyone can recompute it from the documented namespace and name.
	want := uuid.NewSHA1(uuid.MustParse("6f757462-6f78-5265-a61c-792d62617463"), []byte("x\ny\n")).String()
	if got := cloudevents.BatchID([]string{"x", "y"}); got != want || cloudevents.BatchNamespace().String() != "6f757462-6f78-5265-a61c-792d62617463" {
		t.Errorf("BatchID(x, y) = %s, want %s", got, want)
	}
}
