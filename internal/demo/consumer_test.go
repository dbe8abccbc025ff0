package demo

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/outbox-relay/outbox-relay/inbox"
)

func TestLoseAcksLosesEveryNthAcceptedAnswerOnly(t *testing.T) {
	// The fake consumer accepts every delivery but the ones it marks failed or duplicate.
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("as") {
		case "failed":
			http.Error(w, "nope", http.StatusInternalServerError)
		case "duplicate":
			w.Header().Set(inbox.HeaderDuplicate, "true")
			fmt.Fprint(w, "ok")
		default:
			w.Header().Set("X-Test", "kept")
			fmt.Fprint(w, "ok")
		}
	})
	l := &loseAcks{next: next, every: 3}
	send := func(as string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		l.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhook?as="+as, nil))
		return rec
	}
	var codes []int
	for _, as := range []string{"", "failed", "duplicate", "", "duplicate", "", "", "", ""} {
		codes = append(codes, send(as).Code)
	}
	want := []int{200, 500, 200, 200, 200, 502, 200, 200, 502}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes = %v, want %v (every 3rd accepted answer lost; failures and duplicates pass)", codes, want)
	}
	if l.lost.Load() != 2 {
		t.Errorf("lost = %d, want 2", l.lost.Load())
	}
	if rec := send(""); rec.Header().Get("X-Test") != "kept" || rec.Body.String() != "ok" {
		t.Errorf("an answer that gets through lost its header or body: %v %q", rec.Header(), rec.Body.String())
	}
	other := httptest.NewRecorder()
	l.every = 1
	l.ServeHTTP(other, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if other.Code != 200 {
		t.Errorf("/readyz answered %d through loseAcks; only /webhook answers are lost", other.Code)
	}
}
