package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "stalled: events waiting", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()

	tests := []struct {
		name    string
		args    []string
		code    int
		message string
	}{
		{"2xx is healthy", []string{srv.URL + "/healthz"}, 0, ""},
		{"503 is unhealthy and says why", []string{srv.URL + "/readyz"}, 1, "stalled"},
		{"nothing listening", []string{closed}, 1, "probe:"},
		{"no URL", nil, 2, "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			if code := probe(tt.args, &stderr); code != tt.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.message) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.message)
			}
		})
	}
}
