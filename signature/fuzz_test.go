package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func FuzzParseX(f *testing.F) {
	keys, _ := Keys(XSignature, []string{"a", "b"})
	f.Add(string(AppendX(nil, keys, 1700000000, []byte(`{}`))))
	f.Add("sha256=,sha256=zz, sha256=" + hex.EncodeToString(make([]byte, 32)) + " ,md5=00")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		macs := ParseX(v)
		checkMACs(t, macs)
		for _, m := range macs {
			if !strings.Contains(strings.ToLower(v), "sha256="+hex.EncodeToString(m)) {
				t.Fatalf("MAC %x not found in %q", m, v)
			}
		}
	})
}

func FuzzParseStandard(f *testing.F) {
	keys, _ := Keys(StandardWebhooks, []string{specSecret, specSecret})
	f.Add(string(AppendStandard(nil, keys, "msg_1", 1614265330, []byte(`{}`))))
	f.Add("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1a,xxx v2,abc v1,")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		checkMACs(t, ParseStandard(v))
	})
}

// Whatever the header, VerifyX accepts only a request that carries the genuine MAC.
func FuzzVerifyX(f *testing.F) {
	f.Add([]byte(`{"order_id":42}`), "1700000000", "sha256="+xKnown)
	f.Add([]byte(`{}`), "-1", "sha256=00,sha256=")
	key := []byte("topsecret")
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		genuine := "sha256=" + hex.EncodeToString(MAC(key, []byte(ts), body))
		if VerifyX([][]byte{key}, ts, body, sig) && !strings.Contains(strings.ToLower(sig), genuine) {
			t.Fatalf("accepted %q over ts %q body %q", sig, ts, body)
		}
		if !VerifyX([][]byte{key}, ts, body, sig+","+genuine) && len(ParseX(sig)) < MaxEntries {
			t.Fatalf("refused the genuine MAC after %q", sig)
		}
	})
}

func checkMACs(t *testing.T, macs [][]byte) {
	t.Helper()
	if len(macs) > MaxEntries {
		t.Fatalf("%d entries, more than %d", len(macs), MaxEntries)
	}
	for _, m := range macs {
		if len(m) != sha256.Size {
			t.Fatalf("MAC of %d bytes", len(m))
		}
	}
}
