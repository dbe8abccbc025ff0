package inbox

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cloudevents"
	"github.com/outbox-relay/outbox-relay/signature"
)

const fuzzSecret = "fuzz-secret"

const fuzzWhsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// Whatever the headers and body, Verify accepts only when the request carries the MAC that
// the configured secret makes over exactly that timestamp and body; and it always accepts
// the genuine signature.
func FuzzVerifyX(f *testing.F) {
	f.Add([]byte(`{"order_id":42}`), "1700000000", "sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8")
	f.Add([]byte(`{}`), "-1", "sha256=00,sha256=")
	f.Add([]byte{}, "", "")
	v, err := NewVerifier([]string{fuzzSecret}, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		h := http.Header{headerXTimestamp: {ts}, headerXSignature: {sig}}
		now := nowFor(ts)
		genuine := signature.MAC([]byte(fuzzSecret), []byte(ts), body)
		if err := v.Verify(h, body, now); err == nil && !carries(signature.ParseX(sig), genuine) {
			t.Fatalf("accepted a forged signature %q over ts %q", sig, ts)
		}
		if ts == "" {
			return // cannot be signed: the header is required
		}
		h[headerXSignature] = []string{"sha256=" + hex.EncodeToString(genuine)}
		checkGenuine(t, v.Verify(h, body, now), ts)
	})
}

func FuzzVerifyStandard(f *testing.F) {
	f.Add([]byte(`{"test": 2432232314}`), "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	f.Add([]byte(`{}`), "a.b", "1.", "v1,AAAA v1a,BBBB")
	v, err := NewVerifier([]string{fuzzSecret, fuzzWhsec}, 0)
	if err != nil {
		f.Fatal(err)
	}
	key, _ := signature.DecodeWhsec(fuzzWhsec)
	f.Fuzz(func(t *testing.T, body []byte, id, ts, sig string) {
		h := http.Header{headerWebhookID: {id}, headerWebhookTS: {ts}, headerWebhookSig: {sig}}
		now := nowFor(ts)
		genuine := signature.MAC(key, []byte(id+"."+ts+"."), body)
		err := v.Verify(h, body, now)
		if err == nil && !carries(signature.ParseStandard(sig), genuine) {
			t.Fatalf("accepted a forged signature %q over id %q ts %q", sig, id, ts)
		}
		if id == "" || ts == "" {
			return // cannot be signed: the headers are required
		}
		h[headerWebhookSig] = []string{"v1," + base64.StdEncoding.EncodeToString(genuine)}
		checkGenuine(t, v.Verify(h, body, now), ts)
	})
}

func FuzzParseEvent(f *testing.F) {
	f.Add("0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f", "", "1", "1700000000", []byte(`{"a":1}`))
	f.Add("x", "0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f", "-1", "", []byte(`[`))
	f.Fuzz(func(t *testing.T, xid, wid, attempt, ts string, body []byte) {
		h := http.Header{headerXEventID: {xid}, headerWebhookID: {wid}, "X-Attempt": {attempt}, headerXTimestamp: {ts}}
		ev, err := ParseEvent(h, body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if !bytes.Equal(ev.Payload, body) || ev.Attempt < 0 {
			t.Fatalf("event %+v from body %q", ev, body)
		}
	})
}

// nowFor returns a clock at which ts is fresh, or the epoch when ts is not a number.
func nowFor(ts string) time.Time {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec < -1e12 || sec > 1e12 {
		return time.Unix(0, 0)
	}
	return time.Unix(sec, 0)
}

// checkGenuine fails unless the genuine signature was accepted, or refused for its timestamp
// alone: not a number (400), or beyond the range nowFor makes fresh (401).
func checkGenuine(t *testing.T, err error, ts string) {
	t.Helper()
	sec, perr := strconv.ParseInt(ts, 10, 64)
	switch {
	case perr != nil:
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("genuine signature over ts %q: %v, want ErrMalformed", ts, err)
		}
	case sec < -1e12 || sec > 1e12:
		if !errors.Is(err, ErrStaleTimestamp) {
			t.Fatalf("genuine signature over ts %q: %v, want ErrStaleTimestamp", ts, err)
		}
	case err != nil:
		t.Fatalf("genuine signature over fresh ts %q refused: %v", ts, err)
	}
}

func carries(macs [][]byte, mac []byte) bool {
	for _, m := range macs {
		if bytes.Equal(m, mac) {
			return true
		}
	}
	return false
}

// FuzzParseBatch feeds arbitrary bodies and webhook-ids to the inbox's reading of a CloudEvents
// batch: it never panics, refuses only with ErrMalformed, and what it accepts is a non-empty
// list of events with uuid ids and JSON payloads whose webhook-id, if any, is their BatchID.
func FuzzParseBatch(f *testing.F) {
	f.Add(`[{"specversion":"1.0","id":"0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f","source":"/s","type":"t","data":{"a":1}}]`, "")
	f.Add(`[{"specversion":"1.0","id":"0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f","source":"/s","type":"t","data":1},`+
		`{"specversion":"1.0","id":"0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f","source":"/s","type":"t","time":"2026-01-01T00:00:00Z","data":"x"}]`,
		"ba2eb4a8-4c17-5bc4-8a0f-6e5a8a9d2b3c")
	f.Add(`[]`, "")
	f.Add(`[{"specversion":"1.0","id":"x","source":"/s","type":"t"}]`, "x")
	f.Fuzz(func(t *testing.T, body, wid string) {
		h := http.Header{"Content-Type": {"application/cloudevents-batch+json"}, "X-Attempt": {"1"}}
		if wid != "" {
			h.Set(headerWebhookID, wid)
		}
		evs, f, err := ParseEvents(h, []byte(body))
		if f != FormatBatch {
			t.Fatalf("format %v", f)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(evs) == 0 {
			t.Fatal("accepted an empty batch")
		}
		ids := make([]string, len(evs))
		for i, ev := range evs {
			if !json.Valid(ev.Payload) || ev.Attempt != 1 {
				t.Fatalf("event %d: %+v", i, ev)
			}
			ids[i] = ev.ID.String()
		}
		if wid != "" && h.Get(headerWebhookID) != cloudevents.BatchID(ids) {
			t.Fatalf("accepted webhook-id %q for ids %v", wid, ids)
		}
	})
}
