package demo

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/signature"
)

// What each partner should receive follows its subscription: its tenant's orders, every order
// without a tenant filter.
func TestPartnersExpectTheirSubscription(t *testing.T) {
	tenants := map[string]int64{"acme": 5, "globex": 3, "initech": 2, "": 1}
	want := map[string]int64{"acme": 5, "globex": 3, "ledger": 11, "initech": 2}
	for _, p := range newPartners() {
		if got := p.expected(tenants, 11); got != want[p.id] {
			t.Errorf("%s (%s) expects %d of 11 orders, want %d", p.id, p.subscription(), got, want[p.id])
		}
	}
	for _, c := range customers {
		if tn := tenantOf(c); tn != "" && tn != "acme" && tn != "globex" && tn != "initech" {
			t.Errorf("customer %s has tenant %q, which no partner knows", c, tn)
		}
	}
}

// A partner's receiver takes only requests signed with its own secret, and counts a redelivered
// event once.
func TestPartnerVerifiesItsSignatureAndCountsAnEventOnce(t *testing.T) {
	p := &partner{id: "acme", secret: "acme-secret-0123456789", seen: map[string]bool{}}
	srv := httptest.NewServer(p)
	defer srv.Close()
	post := func(secret, id string) int {
		body := `{"order_id": 1}`
		now := time.Now().Unix()
		ts := strconv.FormatInt(now, 10)
		sig := signature.AppendX(nil, [][]byte{[]byte(secret)}, now, []byte(body))
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set(signature.HeaderXTimestamp, ts)
		req.Header.Set(signature.HeaderXSignature, string(sig))
		req.Header.Set("X-Event-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, id := range []string{"e1", "e1", "e2"} {
		if code := post(p.secret, id); code != http.StatusNoContent {
			t.Fatalf("signed with its secret: %d", code)
		}
	}
	if code := post("someone-else-s-secret-0", "e3"); code != http.StatusUnauthorized {
		t.Errorf("signed with another secret: %d, want 401", code)
	}
	if p.received.Load() != 2 || p.badSig.Load() != 1 {
		t.Errorf("received %d, refused %d; want 2 events (e1 once) and 1 refused", p.received.Load(), p.badSig.Load())
	}
}

// The Standard Webhooks partner verifies webhook-signature with its whsec_ secret, and refuses
// an X-Signature request.
func TestPartnerVerifiesStandardWebhooks(t *testing.T) {
	p := &partner{id: "initech", scheme: signature.StandardWebhooks, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		seen: map[string]bool{}}
	srv := httptest.NewServer(p)
	defer srv.Close()
	body := `{"order_id": 1}`
	now := time.Now().Unix()
	keys, err := signature.Keys(signature.StandardWebhooks, []string{p.secret})
	if err != nil {
		t.Fatal(err)
	}
	post := func(set func(h http.Header)) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("X-Event-Id", "e1")
		set(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(func(h http.Header) {
		h.Set(signature.HeaderWebhookID, "e1")
		h.Set(signature.HeaderWebhookTimestamp, strconv.FormatInt(now, 10))
		h.Set(signature.HeaderWebhookSignature, string(signature.AppendStandard(nil, keys, "e1", now, []byte(body))))
	}); code != http.StatusNoContent {
		t.Fatalf("signed the Standard Webhooks way: %d", code)
	}
	if code := post(func(h http.Header) {
		h.Set(signature.HeaderXTimestamp, strconv.FormatInt(now, 10))
		h.Set(signature.HeaderXSignature, string(signature.AppendX(nil, keys, now, []byte(body))))
	}); code != http.StatusUnauthorized {
		t.Fatalf("an X-Signature request to the Standard Webhooks partner: %d, want 401", code)
	}
}
