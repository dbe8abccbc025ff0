package api_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// entry is a log entry as the test wrote it.
type entry struct {
	at        time.Time
	id        string
	attempt   int
	delivered bool
}

// The deliveries of an endpoint, paged with limit and cursor, list every entry of its log once,
// newest first, whatever the flushes' rows overlap in time (an attempt is logged when it ends,
// under the time it began), over two pipelines; filters by status and time hold; another
// endpoint's entries never appear.
func TestDeliveriesPageEveryEntryOnce(t *testing.T) {
	e := newEnv(t)
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "acme", "url": "https://acme.example/"})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now().Add(-30 * time.Minute).Truncate(time.Millisecond)
	var want []entry
	for flush := 0; flush < 40; flush++ {
		for _, pipeline := range []string{"default", "billing"} {
			var ok, failed state.DeliveryEntries
			for i := 0; i < 1+rng.IntN(6); i++ {
				// Entries of a flush begin up to 10 s before it: rows overlap.
				at := base.Add(time.Duration(flush)*time.Second - time.Duration(rng.IntN(10000))*time.Millisecond)
				id := uuid.NewString()
				if rng.IntN(3) == 0 {
					failed.Add(pipeline, "acme", id, 1, at, 500, 20*time.Millisecond, "HTTP 500: boom")
					want = append(want, entry{at, id, 1, false})
					at = at.Add(time.Millisecond)
				}
				ok.Add(pipeline, "acme", id, 2, at, 0, 5*time.Millisecond, "")
				want = append(want, entry{at, id, 2, true})
				ok.Add(pipeline, "other", uuid.NewString(), 1, at, 0, time.Millisecond, "")
			}
			if err := state.InsertDeliveries(ctx, e.pool, "", &ok); err != nil {
				t.Fatal(err)
			}
			if failed.Len() > 0 {
				if err := state.InsertDeliveryAttempts(ctx, e.pool, "", &failed); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	slices.SortFunc(want, func(a, b entry) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		if c := strings.Compare(b.id, a.id); c != 0 {
			return c
		}
		return b.attempt - a.attempt
	})
	for _, tt := range []struct {
		query string
		keep  func(entry) bool
	}{
		{"", func(entry) bool { return true }},
		{"status=failed", func(x entry) bool { return !x.delivered }},
		{"status=delivered", func(x entry) bool { return x.delivered }},
		{"since=" + url.QueryEscape(base.Add(-5*time.Second).Format(time.RFC3339Nano)) + "&until=" +
			url.QueryEscape(base.Add(20*time.Second).Format(time.RFC3339Nano)),
			func(x entry) bool {
				return !x.at.Before(base.Add(-5*time.Second)) && x.at.Before(base.Add(20*time.Second))
			}},
	} {
		t.Run(tt.query, func(t *testing.T) {
			var expect []string
			for _, w := range want {
				if tt.keep(w) {
					expect = append(expect, fmt.Sprintf("%s/%d/%v", w.id, w.attempt, w.delivered))
				}
			}
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				q := "limit=7&" + tt.query
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				p := e.must(http.StatusOK, "GET", "/api/v1/endpoints/acme/deliveries?"+q, opToken, nil)
				for _, d := range p["data"].([]any) {
					m := d.(map[string]any)
					if m["endpoint_id"] != "acme" {
						t.Fatalf("an entry of %v", m["endpoint_id"])
					}
					got = append(got, fmt.Sprintf("%s/%v/%v", m["event_id"], m["attempt"], m["status"] == "delivered"))
				}
				next, _ := p["next_cursor"].(string)
				if next == "" || pages > 200 {
					break
				}
				cursor = next
			}
			if !slices.Equal(got, expect) {
				t.Fatalf("paged %d entries, want %d in order\n got %v\nwant %v", len(got), len(expect), first(got), first(expect))
			}
		})
	}
}

func first(s []string) []string { return s[:min(len(s), 8)] }

// POST /test sends one event signed with the endpoint's secret (the receiver checks it with
// the secret the create answered), answers the attempt's outcome, and logs it; a failing
// answer's status and body come back.
func TestTestSendsASignedEventAndLogsIt(t *testing.T) {
	e := newEnv(t)
	recv := relaytest.NewReceiver("a-secret-the-partner-holds-0123")
	t.Cleanup(recv.Close)
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "acme", "url": recv.URL, "secret": recv.Secret})
	ok := e.must(200, "POST", "/api/v1/endpoints/acme/test", opToken, nil)
	if ok["delivered"] != true || ok["status_code"] != float64(200) || ok["event_type"] != "outbox-relay.ping" {
		t.Fatalf("test answered %v", ok)
	}
	if recv.Requests() != 1 || recv.BadSignatures() != 0 || !recv.Has(ok["event_id"].(string)) {
		t.Fatalf("the receiver saw %d requests, %d badly signed", recv.Requests(), recv.BadSignatures())
	}
	if ok["answer"] != nil {
		t.Fatalf("an answer without a body came back as %q, want null", ok["answer"])
	}
	recv.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })
	bad := e.must(200, "POST", "/api/v1/endpoints/acme/test", opToken, nil)
	if bad["delivered"] != false || bad["status_code"] != float64(503) || !strings.Contains(fmt.Sprint(bad["error"]), "503") {
		t.Fatalf("a failed test answered %v", bad)
	}
	log := e.must(200, "GET", "/api/v1/endpoints/acme/deliveries", opToken, nil)["data"].([]any)
	if len(log) != 2 || log[0].(map[string]any)["status"] != "failed" || log[1].(map[string]any)["status"] != "delivered" ||
		log[0].(map[string]any)["pipeline"] != "test" {
		t.Fatalf("the log holds %v", log)
	}
	ev := e.must(200, "GET", "/api/v1/events/"+bad["event_id"].(string)+"/deliveries", opToken, nil)
	if d := ev["deliveries"].([]any); len(d) != 1 || d[0].(map[string]any)["status_code"] != float64(503) {
		t.Fatalf("the event's deliveries: %v", ev)
	}
	st := e.must(200, "GET", "/api/v1/endpoints/acme/stats", opToken, nil)
	if h := st["last_hour"].(map[string]any); h["succeeded"] != float64(1) || h["failed"] != float64(1) || st["state"] != "enabled" {
		t.Fatalf("stats %v, want one success and one failure in the last hour", st)
	}
}

// A test attempt answers the first KB of the partner's answer, a 2xx one's too: what their
// server said is what a partner wiring a receiver wants to see.
func TestTestAnswersTheBodyOfASuccess(t *testing.T) {
	e := newEnv(t)
	body := "accepted by the partner " + strings.Repeat("x", 2000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "talker", "url": srv.URL})
	res := e.must(200, "POST", "/api/v1/endpoints/talker/test", opToken, nil)
	if res["delivered"] != true || res["answer"] != body[:1024] {
		t.Fatalf("test answered delivered=%v answer=%.60q…, want the first 1024 bytes of the body", res["delivered"], res["answer"])
	}
}
