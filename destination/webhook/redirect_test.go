package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// A 3xx is a failed attempt counted as http_3xx (not http_5xx), and what is logged and stored
// as last_error says that redirects are not followed and where the answer pointed, with any
// password in that address hidden. Both clients: the lean one and net/http's (used behind a
// proxy).
func TestRedirectIsAFailedAttemptThatNamesItsLocation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			w.Header().Set("Location", "https://user:hunter2@new.example/webhooks")
			w.WriteHeader(http.StatusPermanentRedirect)
		case "/bare":
			w.WriteHeader(http.StatusFound)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	ev := &envelope.Message{ID: "id", AggregateType: "order", AggregateID: "1", EventType: "t", Payload: []byte("{}"),
		Sequence: envelope.Sequence(0, 0)}
	send := func(t *testing.T, path string, std bool) destination.Result {
		t.Helper()
		w, err := New(Config{URL: srv.URL + path, Secrets: []string{"s"}})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if std {
			w.raw, w.client = nil, &http.Client{CheckRedirect: noRedirects}
		}
		return w.Send(context.Background(), ev, 1)
	}
	for _, std := range []bool{false, true} {
		name := map[bool]string{false: "lean client", true: "net/http client"}[std]
		t.Run(name, func(t *testing.T) {
			if o := send(t, "/ok", std); !o.Delivered || o.Label != destination.ResultSuccess {
				t.Fatalf("positive control: 200 gave %+v", o)
			}
			o := send(t, "/moved", std)
			if o.Delivered || o.Label != destination.Result3xx || o.Status != http.StatusPermanentRedirect {
				t.Fatalf("308: ok %v, result %q, status %d; want a failure counted as %s", o.Delivered, o.Label, o.Status, destination.Result3xx)
			}
			var re *RedirectError
			if !errors.As(o.Err, &re) {
				t.Fatalf("308: error %v, want a RedirectError", o.Err)
			}
			reason := o.Reason() // last_error
			for _, want := range []string{"http_3xx", "308", "redirects are not followed", "https://user:xxxxx@new.example/webhooks"} {
				if !strings.Contains(reason, want) {
					t.Errorf("last_error %q lacks %q", reason, want)
				}
			}
			if strings.Contains(reason, "hunter2") {
				t.Errorf("last_error shows the Location's password: %q", reason)
			}
			if o := send(t, "/bare", std); o.Label != destination.Result3xx || o.Err == nil ||
				!strings.Contains(o.Err.Error(), "redirects are not followed") {
				t.Errorf("302 without Location: %+v", o)
			}
		})
	}
}

// A URL that does not parse is shown in the error, minus its password, not as "(unparseable)".
func TestMalformedURLIsShownWithoutItsPassword(t *testing.T) {
	tests := []struct{ raw, shown string }{
		{"http://consumer example/webhook", "http://consumer example/webhook"},
		{"http://relay:s3cret@consumer example/webhook", "http://relay:xxxxx@consumer example/webhook"},
		{"http://relay:s3cret@consumer:80a/webhook", "http://relay:xxxxx@consumer:80a/webhook"},
		{"relay:s3cret@consumer/webhook", "relay:xxxxx@consumer/webhook"},
		{"https://relay:s3cret@consumer.example/webhook", "https://relay:xxxxx@consumer.example/webhook"},
		{"ftp://consumer/hook", "ftp://consumer/hook"},
	}
	for _, tt := range tests {
		_, err := ParseURL(tt.raw)
		if err == nil {
			t.Fatalf("%q accepted", tt.raw)
		}
		if !strings.Contains(err.Error(), tt.shown) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: error %q, want it to show %q without the password", tt.raw, err, tt.shown)
		}
	}
}

// A library error does not tell a Go caller about the command line's flags.
func TestURLErrorsNameNoFlag(t *testing.T) {
	for _, raw := range []string{"", "ftp://x/y"} {
		if _, err := ParseURL(raw); err == nil || strings.Contains(err.Error(), "--") || strings.Contains(err.Error(), "WEBHOOK_URL") {
			t.Errorf("ParseURL(%q): %v", raw, err)
		}
	}
}
