package cloudevents_test

import (
	"bytes"
	"testing"

	"github.com/outbox-relay/outbox-relay/cloudevents"
)

// FuzzParseBatch feeds arbitrary bodies to the batch parser: it must never panic, and whatever
// it accepts must survive AppendBatch and a second parse unchanged, so what the inbox reads is
// what a relay could have written.
func FuzzParseBatch(f *testing.F) {
	good, err := cloudevents.AppendBatch(nil, []cloudevents.Event{sample(0), sample(1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"specversion":"1.0","id":"a","source":"s","type":"t","time":"2026-01-02T03:04:05+01:00","data":null}]`))
	f.Add([]byte(`[{"specversion":"1.0","id":"a\u0000","source":"\ud800","type":"t","sequence":"","data":"x"}]`))
	f.Add([]byte(`[{"specversion":"1.0","id":"a","source":"s","type":"t","data_base64":"e30="}]`))
	f.Add([]byte(`[null, 1, "x"]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := cloudevents.ParseBatch(body)
		if err != nil {
			return
		}
		again, err := cloudevents.AppendBatch(nil, evs)
		if err != nil {
			t.Fatalf("accepted %q but cannot re-encode it: %v", body, err)
		}
		evs2, err := cloudevents.ParseBatch(again)
		if err != nil {
			t.Fatalf("re-encoded %q does not parse: %v", again, err)
		}
		if len(evs2) != len(evs) {
			t.Fatalf("%d events, then %d", len(evs), len(evs2))
		}
		for i := range evs {
			a, b := evs[i], evs2[i]
			if !equal(a, b) || !a.Time.Equal(b.Time) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("event %d changed:\n%+v\n%+v", i, a, b)
			}
		}
	})
}
