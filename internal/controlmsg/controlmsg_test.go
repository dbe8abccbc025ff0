package controlmsg

import (
	"encoding/json"
	"reflect"
	"testing"
)

// What Emit writes, DecodeReplay reads back; a message that asks for nothing or does not parse
// is no request.
func TestDecodeReplayReadsWhatEmitWrites(t *testing.T) {
	for _, r := range []Replay{
		{Aggregates: []Aggregate{{Type: "order", ID: "7"}}, Pipeline: "p"},
		{SinceRequest: 42, Pipeline: "p/ep1"},
	} {
		body, err := json.Marshal(r) // Emit's content
		if err != nil {
			t.Fatal(err)
		}
		got, ok := DecodeReplay(body)
		if !ok || !reflect.DeepEqual(got, r) {
			t.Errorf("%s decoded as %+v, %v", body, got, ok)
		}
	}
	for _, body := range []string{`{}`, `{"aggregates": []}`, `not json`, `{"pipeline": "p"}`} {
		if r, ok := DecodeReplay([]byte(body)); ok {
			t.Errorf("%s decoded as a request: %+v", body, r)
		}
	}
}
