package api_test

import (
	"context"
	"sync"
	"testing"
)

// A create retried with the same Idempotency-Key gets the first answer again (the same id and
// secret), even when the retries race; the same key with another body is refused; without a
// key (the control) a retry makes a second endpoint.
func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	e := newEnv(t)
	body := map[string]any{"url": "https://acme.example/hooks", "tenant_id": "acme"}
	var wg sync.WaitGroup
	answers := make([]answer, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.do("POST", "/api/v1/endpoints", opToken, body, "Idempotency-Key", "signup-42")
		}()
	}
	wg.Wait()
	first := answers[0]
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	replayed := 0
	for _, a := range answers {
		if a.status != 201 || string(a.body) != string(first.body) {
			t.Fatalf("a retry answered %d %s, want the first answer %s", a.status, a.body, first.body)
		}
		if a.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != len(answers)-1 {
		t.Fatalf("%d answers say they were replayed, want %d", replayed, len(answers)-1)
	}
	count := func() (n int) {
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_endpoints`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d endpoints after retries with one key, want 1", n)
	}
	var stored string
	if err := e.pool.QueryRow(context.Background(), `SELECT body FROM outbox_api_idempotency`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if secret := first.json(t)["secret"].(string); len(stored) < 10 || contains(stored, secret) {
		t.Fatal("the stored answer holds the secret in clear")
	}
	e.must(409, "POST", "/api/v1/endpoints", opToken, map[string]any{"url": "https://other.example/"}, "Idempotency-Key", "signup-42")
	// A tenant's key is its own: the same key from another caller is another request.
	e.must(201, "POST", "/api/v1/endpoints", e.tenant("acme"), map[string]any{"url": "https://acme.example/2"}, "Idempotency-Key", "signup-42")
	e.must(201, "POST", "/api/v1/endpoints", opToken, body)
	if n := count(); n != 3 {
		t.Fatalf("%d endpoints, want 3 (the control without a key makes a second one)", n)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
