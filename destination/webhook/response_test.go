package webhook

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestReadResponse(t *testing.T) {
	cases := []struct {
		name, raw  string
		status     int
		retryAfter string
		keepAlive  bool
		rest       string // what must remain unread: the next answer on the connection
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", 200, "", true, "NEXT"},
		{"chunked", "HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nretry-after: 7\r\n\r\n5\r\nhello\r\n0\r\n\r\nNEXT", 503, "7", true, "NEXT"},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\nNEXT", 204, "", true, "NEXT"},
		{"interim 100", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\nNEXT", 201, "", true, "NEXT"},
		{"close", "HTTP/1.1 500 Oops\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 500, "", false, ""},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "", false, ""},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nwhatever comes", 200, "", false, ""},
		{"too long to keep", "HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n", 200, "", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(c.raw))
			r, err := readResponse(br, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != c.status || r.retryAfter != c.retryAfter || r.keepAlive != c.keepAlive {
				t.Fatalf("got %+v", r)
			}
			if c.keepAlive {
				rest, _ := br.Peek(br.Buffered())
				if string(rest) != c.rest {
					t.Fatalf("left %q unread, want %q", rest, c.rest)
				}
			}
		})
	}
	for _, bad := range []string{"", "HTTP/2 200\r\n\r\n", "SSH-2.0-OpenSSH\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n"} {
		if _, err := readResponse(bufio.NewReader(strings.NewReader(bad)), false); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzReadResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
	f.Add("HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 x\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := readResponse(bufio.NewReaderSize(strings.NewReader(raw), 256), false)
		if err == nil && (r.status < 200 || r.status > 999) {
			t.Fatalf("accepted status %d", r.status)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"7", 7 * time.Second, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // a date passed: at once
		{"3600", time.Hour, true}, // the publisher caps it
		{"soon", 0, false},
		{"-1", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if d, ok := retryAfter(tt.header, now); d != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.header, d, ok, tt.want, tt.ok)
		}
	}
}
