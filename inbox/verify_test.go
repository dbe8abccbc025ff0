package inbox_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Known answer, computed independently with
// printf '1700000000{"order_id":42}' | openssl dgst -sha256 -hmac 'topsecret'
func TestVerifyXSignatureKnownAnswer(t *testing.T) {
	h := http.Header{}
	h.Set("X-Timestamp", "1700000000")
	h.Set("X-Signature", "sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8")
	err := inbox.Verify(h, []byte(`{"order_id":42}`), []string{"topsecret"}, 0, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatalf("known-answer X-Signature refused: %v", err)
	}
}

// The Standard Webhooks spec's published vector; its webhook-id is not a uuid, which only
// ParseEvent cares about.
func TestVerifyStandardWebhooksSpecVector(t *testing.T) {
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	err := inbox.Verify(h, []byte(`{"test": 2432232314}`), []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 0, time.Unix(1614265330, 0))
	if err != nil {
		t.Fatalf("spec vector refused: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	const ts = 1700000000
	now := time.Unix(ts, 0)
	x := delivery{secrets: []string{"topsecret"}, id: "0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f", ts: ts, body: []byte(`{"a":1}`)}
	std := x
	std.scheme, std.secrets = signature.StandardWebhooks, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	cases := []struct {
		name    string
		d       delivery
		edit    func(h http.Header, d *delivery)
		secrets []string
		now     time.Time
		want    error
	}{
		{name: "wrong secret", d: x, secrets: []string{"other"}, now: now, want: inbox.ErrBadSignature},
		{name: "tampered body", d: x, edit: func(_ http.Header, d *delivery) { d.body = []byte(`{"a":2}`) }, now: now, want: inbox.ErrBadSignature},
		{name: "tampered timestamp", d: x, edit: func(h http.Header, _ *delivery) { h.Set("X-Timestamp", "1700000001") }, now: now, want: inbox.ErrBadSignature},
		{name: "stale by 301s", d: x, now: now.Add(301 * time.Second), want: inbox.ErrStaleTimestamp},
		{name: "future by 301s", d: x, now: now.Add(-301 * time.Second), want: inbox.ErrStaleTimestamp},
		{name: "no signature", d: x, edit: func(h http.Header, _ *delivery) { h.Del("X-Signature") }, now: now, want: inbox.ErrMissingSignature},
		{name: "no timestamp", d: x, edit: func(h http.Header, _ *delivery) { h.Del("X-Timestamp") }, now: now, want: inbox.ErrMissingSignature},
		{name: "garbage signature", d: x, edit: func(h http.Header, _ *delivery) { h.Set("X-Signature", "sha256=zz") }, now: now, want: inbox.ErrBadSignature},
		{name: "standard: wrong secret", d: std, secrets: []string{"whsec_" + "c2VjcmV0LWtleS1vZi0yNC1ieXRlcyE="}, now: now, want: inbox.ErrBadSignature},
		{name: "standard: no whsec secret", d: std, secrets: []string{"topsecret"}, now: now, want: inbox.ErrBadSignature},
		{name: "standard: other id", d: std, edit: func(h http.Header, _ *delivery) { h.Set("webhook-id", "msg_other") }, now: now, want: inbox.ErrBadSignature},
		{name: "standard: no id", d: std, edit: func(h http.Header, _ *delivery) { h.Del("webhook-id") }, now: now, want: inbox.ErrMissingSignature},
		{name: "standard: stale", d: std, now: now.Add(time.Hour), want: inbox.ErrStaleTimestamp},
		{name: "standard: future", d: std, now: now.Add(-time.Hour), want: inbox.ErrStaleTimestamp},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			h := d.header(t)
			if c.edit != nil {
				c.edit(h, &d)
			}
			secrets := c.secrets
			if secrets == nil {
				secrets = c.d.secrets
			}
			err := inbox.Verify(h, d.body, secrets, 0, c.now)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if got := inbox.StatusCode(err); got != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", got)
			}
		})
	}
}

func TestVerifyToleranceEdges(t *testing.T) {
	d := delivery{secrets: []string{"s"}, id: "x", ts: 1700000000, body: []byte(`{}`)}
	h := d.header(t)
	for _, off := range []time.Duration{-300 * time.Second, 0, 300 * time.Second} {
		if err := inbox.Verify(h, d.body, d.secrets, 0, time.Unix(d.ts, 0).Add(off)); err != nil {
			t.Errorf("offset %s inside the default tolerance refused: %v", off, err)
		}
	}
	if err := inbox.Verify(h, d.body, d.secrets, 10*time.Second, time.Unix(d.ts+11, 0)); !errors.Is(err, inbox.ErrStaleTimestamp) {
		t.Errorf("custom tolerance ignored: %v", err)
	}
}

// A relay mid-rotation signs with old and new; a consumer that knows either accepts, one that
// knows neither refuses.
func TestVerifyRotation(t *testing.T) {
	cases := map[string]struct {
		scheme        signature.Scheme
		old, new, bad string
	}{
		"x-signature":       {signature.XSignature, "old-secret", "new-secret", "third-secret"},
		"standard-webhooks": {signature.StandardWebhooks, "whsec_b2xkLW9sZC1vbGQtb2xkLW9sZC1vbGQh", "whsec_bmV3LW5ldy1uZXctbmV3LW5ldy1uZXch", "whsec_dGhpcmQtdGhpcmQtdGhpcmQtdGhpcmQh"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := delivery{scheme: c.scheme, secrets: []string{c.old, c.new}, id: "0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f", ts: 1700000000, body: []byte(`{"a":1}`)}
			h := d.header(t)
			now := time.Unix(d.ts, 0)
			for _, known := range [][]string{{c.new}, {c.old}, {c.bad, c.new}} {
				if err := inbox.Verify(h, d.body, known, 0, now); err != nil {
					t.Errorf("consumer knowing %v refused a rotated delivery: %v", known, err)
				}
			}
			if err := inbox.Verify(h, d.body, []string{c.bad}, 0, now); !errors.Is(err, inbox.ErrBadSignature) {
				t.Errorf("consumer knowing neither secret: %v", err)
			}
		})
	}
}

// A genuine signature over a timestamp that is not a number is the sender's bug, not an
// attack: 400.
func TestVerifyNonNumericTimestamp(t *testing.T) {
	keys, _ := signature.Keys(signature.XSignature, []string{"s"})
	h := http.Header{}
	h.Set("X-Timestamp", "soon")
	mac := signature.MAC(keys[0], []byte("soon"), []byte(`{}`))
	h.Set("X-Signature", "sha256="+hexString(mac))
	err := inbox.Verify(h, []byte(`{}`), []string{"s"}, 0, time.Now())
	if !errors.Is(err, inbox.ErrMalformed) || inbox.StatusCode(err) != http.StatusBadRequest {
		t.Fatalf("err = %v", err)
	}
}

func TestNewVerifierErrors(t *testing.T) {
	cases := map[string]struct {
		secrets   []string
		tolerance time.Duration
	}{
		"no secrets":         {nil, 0},
		"bad whsec":          {[]string{"whsec_%%%"}, 0},
		"negative tolerance": {[]string{"s"}, -time.Second},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := inbox.NewVerifier(c.secrets, c.tolerance); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	_, err := inbox.NewVerifier([]string{"whsec_%%%"}, 0)
	if err != nil && contains(err.Error(), "%%%") {
		t.Fatalf("error reveals the secret: %v", err)
	}
}
