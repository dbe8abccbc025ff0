package seal

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func newKeyText(t *testing.T) string {
	t.Helper()
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestSealOpens(t *testing.T) {
	r, err := Parse(newKeyText(t))
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Seal("acme", "topsecret-topsecret")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Seal("acme", "topsecret-topsecret")
	if a == b {
		t.Fatal("two seals of one secret are equal: the nonce is not random")
	}
	if !strings.HasPrefix(a, "sealed:v1:"+r.ID()+":") || strings.Contains(a, "topsecret") {
		t.Fatalf("sealed value %q: want sealed:v1:%s:<base64> without the secret", a, r.ID())
	}
	if id, ok := ID(a); !ok || id != r.ID() {
		t.Fatalf("ID(%q) = %q, %v", a, id, ok)
	}
	for _, v := range []string{a, b} {
		got, err := r.Open("acme", v)
		if err != nil || got != "topsecret-topsecret" {
			t.Fatalf("Open = %q, %v", got, err)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	r, _ := Parse(newKeyText(t))
	other, _ := Parse(newKeyText(t))
	v, _ := r.Seal("acme", "topsecret-topsecret")
	body := v[strings.LastIndex(v, ":")+1:]
	flipped := []byte(body)
	if flipped[len(flipped)/2] == 'A' {
		flipped[len(flipped)/2] = 'B'
	} else {
		flipped[len(flipped)/2] = 'A'
	}
	for _, tt := range []struct {
		name, binding, value string
		want                 error
		says                 string
	}{
		{"another endpoint's row", "globex", v, ErrOpen, "sealed for another endpoint id"},
		{"a damaged ciphertext", "acme", strings.TrimSuffix(v, body) + string(flipped), ErrOpen, "damaged"},
		{"a short body", "acme", "sealed:v1:" + r.ID() + ":AAAA", ErrOpen, "damaged"},
		{"a key not in the file", "acme", "sealed:v1:" + other.ID() + ":" + body, ErrUnknownKey, other.ID()},
		{"a newer version", "acme", "sealed:v2:abcd1234:xyz", ErrOpen, "not of version v1"},
		{"not sealed", "acme", "topsecret", ErrOpen, "does not start with sealed:v1:"},
		{"no key id", "acme", "sealed:v1:xyz", ErrOpen, "not sealed:v1:<key id>:<base64>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Open(tt.binding, tt.value)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Open = %q, %v; want %v saying %q", got, err, tt.want, tt.says)
			}
		})
	}
}

// Rotation: the first key seals, every key opens, so values sealed before the new key was put
// first still open.
func TestKeyringRotation(t *testing.T) {
	oldKey, newKey := newKeyText(t), newKeyText(t)
	before, _ := Parse(oldKey)
	v, _ := before.Seal("acme", "topsecret-topsecret")
	after, err := Parse("# rotated\n" + newKey + "\n\n" + oldKey + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if after.ID() == before.ID() || !after.Has(before.ID()) {
		t.Fatalf("after rotation the sealing key is %s (before %s); want the new key, with the old one kept", after.ID(), before.ID())
	}
	if got, err := after.Open("acme", v); err != nil || got != "topsecret-topsecret" {
		t.Fatalf("the old key's value does not open after rotation: %q, %v", got, err)
	}
	w, _ := after.Seal("acme", "x")
	if id, _ := ID(w); id != after.ID() {
		t.Fatalf("sealed with %s, want the first key %s", id, after.ID())
	}
	if comma, err := Parse(newKey + "," + oldKey); err != nil || comma.ID() != after.ID() {
		t.Fatalf("comma-separated keys: %v", err)
	}
}

func TestParseRefusesBadKeys(t *testing.T) {
	k := newKeyText(t)
	short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	for _, tt := range []struct{ name, text, says string }{
		{"nothing", "", "no secrets key"},
		{"comments only", "# key\n\n", "no secrets key"},
		{"not base64", "not base64!", "line 1: is not base64"},
		{"16 bytes", k + "\n" + short, "line 2: decodes to 16 bytes, not 32"},
		{"twice", k + "\n" + k, "listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Parse: %v, want %q", err, tt.says)
			}
			if strings.Contains(err.Error(), k) || strings.Contains(err.Error(), short) {
				t.Fatalf("the error shows a key: %v", err)
			}
		})
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		raw, _ := base64.StdEncoding.DecodeString(k)
		if r, err := Parse(enc.EncodeToString(raw)); err != nil || r.ID() != KeyID(raw) {
			t.Fatalf("a key in another base64 alphabet: %v", err)
		}
	}
}

// FuzzOpen opens values read from the table, which come from outside: refused, never a panic.
func FuzzOpen(f *testing.F) {
	r, _ := Parse("mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U=")
	good, _ := r.Seal("acme", "topsecret-topsecret")
	for _, s := range []string{good, "sealed:v1:", "sealed:v1:" + r.ID() + ":", "sealed:v2:x:y", "x"} {
		f.Add("acme", s)
	}
	f.Fuzz(func(t *testing.T, binding, sealed string) {
		if _, err := r.Open(binding, sealed); err == nil && binding != "acme" {
			t.Fatalf("a value opened for %q, sealed for acme", binding)
		}
		_, _ = ID(sealed)
	})
}
