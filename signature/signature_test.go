package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

// Known answers, each computed independently of this package with openssl:
//
//	printf '1700000000{"order_id":42}' | openssl dgst -sha256 -hmac 'topsecret'
//	printf 'msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}' |
//	  openssl dgst -sha256 -hmac 'second-key-for-rotation!' -binary | base64
//
// and the Standard Webhooks spec's published example (specSecret).
const (
	xKnown     = "625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8"
	xOld       = "80dae9501b06aac2c79ad235c638edca9e566886fc7dbcfe7609984e89bd152e" // key "old"
	xNew       = "f9326b79fc64b545d744f7709414e27d09dfde87a68715be0af02fa2b048e9b0" // key "new"
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specSig    = "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// whsec_ of base64("second-key-for-rotation!")
	secondWhsec = "whsec_c2Vjb25kLWtleS1mb3Itcm90YXRpb24h"
	secondSig   = "XyCMG3sa1LpyP6Ucp8uYh/7H750WoyT1iYkfXnNfSoQ="
	specID      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specBody    = `{"test": 2432232314}`
	orderBody   = `{"order_id":42}`
)

// Fixed secrets, timestamp and body give exactly this header, from the functions and from a
// Signer alike.
func TestKnownAnswers(t *testing.T) {
	cases := []struct {
		name    string
		scheme  Scheme
		secrets []string
		id      string
		ts      int64
		body    string
		want    string
	}{
		{"x-signature", XSignature, []string{"topsecret"}, "", 1700000000, orderBody, "sha256=" + xKnown},
		{"x-signature rotation", XSignature, []string{"old", "new"}, "", 1700000000, orderBody, "sha256=" + xOld + ",sha256=" + xNew},
		{"standard webhooks spec", StandardWebhooks, []string{specSecret}, specID, 1614265330, specBody, "v1," + specSig},
		{"standard webhooks rotation", StandardWebhooks, []string{specSecret, secondWhsec}, specID, 1614265330, specBody, "v1," + specSig + " v1," + secondSig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys, err := Keys(c.scheme, c.secrets)
			if err != nil {
				t.Fatal(err)
			}
			s := NewSigner(keys)
			var fn, signer string
			if c.scheme == XSignature {
				fn, signer = string(AppendX(nil, keys, c.ts, []byte(c.body))), string(s.AppendX(nil, c.ts, []byte(c.body)))
			} else {
				fn, signer = string(AppendStandard(nil, keys, c.id, c.ts, []byte(c.body))), string(s.AppendStandard(nil, c.id, c.ts, []byte(c.body)))
			}
			if fn != c.want || signer != c.want {
				t.Fatalf("header = %s (functions), %s (Signer), want %s", fn, signer, c.want)
			}
		})
	}
}

// The X-Signature known answer is a plain HMAC over timestamp||body: nothing in between.
func TestXSignedBytesAreTimestampThenBody(t *testing.T) {
	m := hmac.New(sha256.New, []byte("topsecret"))
	m.Write([]byte(`1700000000{"order_id":42}`))
	if hex.EncodeToString(m.Sum(nil)) != xKnown {
		t.Fatal("known answer disagrees with a direct HMAC over timestamp||body")
	}
}

func TestKeysErrors(t *testing.T) {
	if _, err := Keys(XSignature, nil); err != ErrNoSecret {
		t.Fatalf("no secrets: %v", err)
	}
	if _, err := Keys(StandardWebhooks, []string{"plain-secret"}); err == nil {
		t.Fatal("a non-whsec secret was accepted for standard-webhooks")
	}
	if _, err := ParseScheme("md5"); err == nil {
		t.Fatal("unknown scheme accepted")
	}
}

func TestSplitSecrets(t *testing.T) {
	if got := SplitSecrets(" old , new ,"); len(got) != 2 || got[0] != "old" || got[1] != "new" {
		t.Fatalf("SplitSecrets = %q", got)
	}
}

func TestSignerReusesStateSafely(t *testing.T) {
	keys := [][]byte{[]byte("old"), []byte("new")}
	s := NewSigner(keys)
	body := []byte(`{"a":1}`)
	for i := 0; i < 3; i++ { // reused state must give the same answer
		if got, want := string(s.AppendX(nil, 1700000000, body)), string(AppendX(nil, keys, 1700000000, body)); got != want {
			t.Fatalf("Signer.AppendX = %s, want %s", got, want)
		}
		if got, want := string(s.AppendStandard(nil, "id", 5, body)), string(AppendStandard(nil, keys, "id", 5, body)); got != want {
			t.Fatalf("Signer.AppendStandard = %s, want %s", got, want)
		}
	}
}

// A Signer starts each MAC from its key's padded states: for keys shorter than, as long as and
// longer than SHA-256's block (hashed first, RFC 2104), it gives crypto/hmac's answer.
func TestSignerMatchesHMACForEveryKeyLength(t *testing.T) {
	body := []byte(`{"order_id":42}`)
	for _, n := range []int{0, 1, 32, 63, 64, 65, 100, 200} {
		key := bytes.Repeat([]byte{byte(n + 1)}, n)
		m := hmac.New(sha256.New, key)
		m.Write([]byte("1700000000"))
		m.Write(body)
		want := "sha256=" + hex.EncodeToString(m.Sum(nil))
		s := NewSigner([][]byte{key})
		for range 2 { // the pooled SHA-256 left by one signature does not leak into the next
			if got := string(s.AppendX(nil, 1700000000, body)); got != want {
				t.Fatalf("key of %d bytes: Signer.AppendX = %s, want %s", n, got, want)
			}
		}
	}
}

func TestVerifyX(t *testing.T) {
	keys := [][]byte{[]byte("topsecret")}
	cases := []struct {
		name   string
		keys   [][]byte
		ts     string
		body   string
		values []string
		want   bool
	}{
		{"known answer", keys, "1700000000", orderBody, []string{"sha256=" + xKnown}, true},
		{"upper-case hex", keys, "1700000000", orderBody, []string{"sha256=" + upper(xKnown)}, true},
		{"rotation: receiver knows the new key", [][]byte{[]byte("new")}, "1700000000", orderBody, []string{"sha256=" + xOld + ",sha256=" + xNew}, true},
		{"rotation: receiver knows the old key", [][]byte{[]byte("x"), []byte("old")}, "1700000000", orderBody, []string{"sha256=" + xOld + ", sha256=" + xNew}, true},
		{"entry in a second header", keys, "1700000000", orderBody, []string{"sha256=" + xOld, "sha256=" + xKnown}, true},
		{"unknown algorithm skipped", keys, "1700000000", orderBody, []string{"sha512=abc,sha256=" + xKnown}, true},
		{"wrong key", [][]byte{[]byte("other")}, "1700000000", orderBody, []string{"sha256=" + xKnown}, false},
		{"tampered body", keys, "1700000000", `{"order_id":43}`, []string{"sha256=" + xKnown}, false},
		{"tampered timestamp", keys, "1700000001", orderBody, []string{"sha256=" + xKnown}, false},
		{"timestamp re-formatted", keys, "01700000000", orderBody, []string{"sha256=" + xKnown}, false},
		{"no entry", keys, "1700000000", orderBody, nil, false},
		{"no key", nil, "1700000000", orderBody, []string{"sha256=" + xKnown}, false},
		{"garbage", keys, "1700000000", orderBody, []string{"sha256=zz"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := VerifyX(c.keys, c.ts, []byte(c.body), c.values...); got != c.want {
				t.Fatalf("VerifyX = %v, want %v", got, c.want)
			}
		})
	}
}

func TestVerifyStandard(t *testing.T) {
	keys, _ := Keys(StandardWebhooks, []string{specSecret})
	second, _ := Keys(StandardWebhooks, []string{secondWhsec})
	rotated := "v1," + specSig + " v1," + secondSig
	cases := []struct {
		name      string
		keys      [][]byte
		id, ts    string
		body, sig string
		want      bool
	}{
		{"spec vector", keys, specID, "1614265330", specBody, "v1," + specSig, true},
		{"rotation: receiver knows the second key", second, specID, "1614265330", specBody, rotated, true},
		{"v1a entry skipped", keys, specID, "1614265330", specBody, "v1a,xyz v1," + specSig, true},
		{"other id", keys, "msg_other", "1614265330", specBody, "v1," + specSig, false},
		{"other timestamp", keys, specID, "1614265331", specBody, "v1," + specSig, false},
		{"tampered body", keys, specID, "1614265330", `{"test": 2432232315}`, "v1," + specSig, false},
		{"secret string used as the key", [][]byte{[]byte(specSecret)}, specID, "1614265330", specBody, "v1," + specSig, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := VerifyStandard(c.keys, c.id, c.ts, []byte(c.body), c.sig); got != c.want {
				t.Fatalf("VerifyStandard = %v, want %v", got, c.want)
			}
		})
	}
}

func TestFreshWindow(t *testing.T) {
	now := time.Unix(1700000000, 0)
	cases := []struct {
		signed    int64
		tolerance time.Duration
		want      bool
	}{
		{1700000000, 0, true},
		{1700000000 - 300, 0, true},  // 5 minutes old: the edge is inside
		{1700000000 + 300, 0, true},  // 5 minutes ahead
		{1700000000 - 301, 0, false}, // replayed too late
		{1700000000 + 301, 0, false}, // from a clock too far ahead
		{1700000000 - 11, 10 * time.Second, false},
		{1700000000 - 10, 10 * time.Second, true},
		{-1 << 63, 0, false},
		{1<<63 - 1, 0, false},
	}
	for _, c := range cases {
		if got := Fresh(c.signed, now, c.tolerance); got != c.want {
			t.Errorf("Fresh(%d, tolerance %s) = %v, want %v", c.signed, c.tolerance, got, c.want)
		}
	}
}

func TestParseReadsAtMostMaxEntries(t *testing.T) {
	one := "sha256=" + xKnown
	var many []string
	for range MaxEntries + 5 {
		many = append(many, one)
	}
	if n := len(ParseX(many...)); n != MaxEntries {
		t.Fatalf("ParseX read %d entries, want %d", n, MaxEntries)
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func BenchmarkSignerAppendX(b *testing.B) {
	s := NewSigner([][]byte{[]byte("topsecret")})
	body := []byte(`{"order_id":42,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = s.AppendX(buf[:0], 1700000000, body)
	}
}
