package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// Known answer: computed independently with
// printf '1700000000{"order_id":42}' | openssl dgst -sha256 -hmac 'topsecret'
func TestXSignatureKnownAnswer(t *testing.T) {
	got := string(AppendX(nil, [][]byte{[]byte("topsecret")}, 1700000000, []byte(`{"order_id":42}`)))
	want := "sha256=" + xKnown
	if got != want {
		t.Fatalf("X-Signature = %s, want %s", got, want)
	}
	m := hmac.New(sha256.New, []byte("topsecret"))
	m.Write([]byte(`1700000000{"order_id":42}`))
	if hex.EncodeToString(m.Sum(nil)) != xKnown {
		t.Fatal("known answer disagrees with a direct HMAC over timestamp||body")
	}
}

// The Standard Webhooks spec's published example.
func TestStandardWebhooksSpecVector(t *testing.T) {
	keys, err := Keys(StandardWebhooks, []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	if err != nil {
		t.Fatal(err)
	}
	got := string(AppendStandard(nil, keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("webhook-signature = %s, want %s", got, want)
	}
}

func TestRotationSendsEverySignature(t *testing.T) {
	keys, _ := Keys(XSignature, SplitSecrets(" old , new ,"))
	got := string(AppendX(nil, keys, 1, []byte("{}")))
	a := string(AppendX(nil, keys[:1], 1, []byte("{}")))
	b := string(AppendX(nil, keys[1:], 1, []byte("{}")))
	if got != a+","+b {
		t.Fatalf("rotated header %q, want %q", got, a+","+b)
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

const xKnown = "625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8"

func TestSignerMatchesTheFunctions(t *testing.T) {
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

func BenchmarkSignerAppendX(b *testing.B) {
	s := NewSigner([][]byte{[]byte("topsecret")})
	body := []byte(`{"order_id":42,"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = s.AppendX(buf[:0], 1700000000, body)
	}
}
