package inbox_test

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

func hexString(b []byte) string      { return hex.EncodeToString(b) }
func contains(s, substr string) bool { return strings.Contains(s, substr) }

func TestParseEventReadsTheContract(t *testing.T) {
	for _, scheme := range []signature.Scheme{signature.XSignature, signature.StandardWebhooks} {
		t.Run(scheme.String(), func(t *testing.T) {
			d := newDelivery(`{"order_id":42}`)
			d.scheme, d.secrets, d.attempt, d.ts = scheme, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 3, 1700000000
			ev, err := inbox.ParseEvent(d.header(t), d.body)
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID.String() != d.id || ev.Type != "order.created" || ev.AggregateType != "order" ||
				ev.AggregateID != "42" || ev.Attempt != 3 || ev.Sequence != "0000000001" ||
				!ev.Timestamp.Equal(time.Unix(1700000000, 0)) || string(ev.Payload) != `{"order_id":42}` {
				t.Fatalf("event = %+v", ev)
			}
		})
	}
}

func TestParseEventRefusesMalformed(t *testing.T) {
	cases := map[string]struct {
		edit func(h http.Header)
		body string
	}{
		"id not a uuid":         {edit: func(h http.Header) { h.Set("X-Event-Id", "42") }},
		"no id":                 {edit: func(h http.Header) { h.Del("X-Event-Id") }},
		"ids disagree":          {edit: func(h http.Header) { h.Set("webhook-id", "0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f") }},
		"body not JSON":         {body: `{"a":`},
		"empty body":            {body: " "},
		"attempt not a number":  {edit: func(h http.Header) { h.Set("X-Attempt", "first") }},
		"attempt zero":          {edit: func(h http.Header) { h.Set("X-Attempt", "0") }},
		"timestamp not integer": {edit: func(h http.Header) { h.Set("X-Timestamp", "1.5") }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := newDelivery(`{"ok":true}`)
			if c.body != "" {
				d.body = []byte(c.body)
			}
			h := d.header(t)
			if c.edit != nil {
				c.edit(h)
			}
			_, err := inbox.ParseEvent(h, d.body)
			if !errors.Is(err, inbox.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestStatusCode(t *testing.T) {
	cases := map[error]int{
		nil:                       200,
		inbox.ErrBodyTooLarge:     413,
		inbox.ErrMissingSignature: 401,
		inbox.ErrBadSignature:     401,
		inbox.ErrStaleTimestamp:   401,
		inbox.ErrMalformed:        400,
		errors.New("handler"):     500,
	}
	for err, want := range cases {
		if got := inbox.StatusCode(err); got != want {
			t.Errorf("StatusCode(%v) = %d, want %d", err, got, want)
		}
	}
}
