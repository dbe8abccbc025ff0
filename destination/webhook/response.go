package webhook

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"
)

// response is what delivery needs from an HTTP/1.x answer.
type response struct {
	status     int
	retryAfter string
	location   string // of a redirect, which is not followed but reported
	keepAlive  bool
	answer     []byte // the start of a non-2xx answer's body (any answer's with KeepAnswers), for the delivery log
}

// maxAnswer is how much of a failed answer's body is kept (destination.Result.Answer).
const maxAnswer = 1024

// answerSink keeps the first maxAnswer bytes written to it and discards the rest.
type answerSink struct{ b []byte }

func (a *answerSink) Write(p []byte) (int, error) {
	if room := maxAnswer - len(a.b); room > 0 {
		a.b = append(a.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// bodySink is where an answer's body goes: nowhere for a 2xx (nothing is kept of a success)
// unless keepAll, else the start of it into r.answer when done.
func bodySink(status int, keepAll bool) (io.Writer, *answerSink) {
	if status >= 200 && status < 300 && !keepAll {
		return io.Discard, nil
	}
	a := &answerSink{}
	return a, a
}

// maxLocation caps the Location kept from a redirect, for the log line and last_error.
const maxLocation = 512

// errMalformedResponse wraps answers that are not HTTP/1.x.
var errMalformedResponse = errors.New("malformed HTTP response")

// readResponse reads one answer to a POST from br, body included, without allocating per
// header as http.ReadResponse does: it keeps only the status, Retry-After, Location and what frames the
// body (Content-Length, chunked Transfer-Encoding, Connection). Interim 1xx answers are skipped.
// At most maxDrain body bytes are read; a longer body, an HTTP/1.0 answer or Connection: close
// ends keepAlive.
func readResponse(br *bufio.Reader, keepAll bool) (response, error) {
	for {
		r, framing, err := readHead(br)
		if err != nil {
			return r, err
		}
		if r.status >= 100 && r.status < 200 {
			continue
		}
		if err := framing.drain(br, r.status, &r, keepAll); err != nil {
			return r, err
		}
		return r, nil
	}
}

type bodyFraming struct {
	chunked bool
	length  int64 // -1 when unknown
}

func readHead(br *bufio.Reader) (response, bodyFraming, error) {
	r := response{keepAlive: true}
	f := bodyFraming{length: -1}
	line, err := readLine(br)
	if err != nil {
		return r, f, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return r, f, fmt.Errorf("%w: status line %q", errMalformedResponse, truncate(line))
	}
	if line[7] == '0' {
		r.keepAlive = false
	}
	if r.status, err = strconv.Atoi(string(line[9:12])); err != nil || r.status < 100 {
		return r, f, fmt.Errorf("%w: status line %q", errMalformedResponse, truncate(line))
	}
	for {
		line, err := readLine(br)
		if err != nil {
			return r, f, err
		}
		if len(line) == 0 {
			return r, f, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return r, f, fmt.Errorf("%w: header line %q", errMalformedResponse, truncate(line))
		}
		header(&r, &f, name, bytes.TrimSpace(value))
	}
}

func header(r *response, f *bodyFraming, name, value []byte) {
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
			f.length = n
		}
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		f.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
	case bytes.EqualFold(name, []byte("Connection")):
		if bytes.Contains(bytes.ToLower(value), []byte("close")) {
			r.keepAlive = false
		}
	case bytes.EqualFold(name, []byte("Retry-After")):
		r.retryAfter = string(value)
	case bytes.EqualFold(name, []byte("Location")):
		r.location = string(value[:min(len(value), maxLocation)])
	}
}

// drain reads the body as framed; anything it cannot read whole within maxDrain ends
// keep-alive.
func (f bodyFraming) drain(br *bufio.Reader, status int, r *response, keepAll bool) error {
	sink, answer := bodySink(status, keepAll)
	if answer != nil {
		defer func() { r.answer = answer.b }()
	}
	switch {
	case status == 204 || status == 304:
		return nil
	case f.chunked:
		n, err := io.Copy(sink, io.LimitReader(httputil.NewChunkedReader(br), maxDrain+1))
		if n > maxDrain {
			r.keepAlive = false
		}
		if err != nil {
			return err
		}
		// Trailers, then the empty line that ends the chunked body.
		for {
			line, err := readLine(br)
			if err != nil || len(line) == 0 {
				return err
			}
		}
	case f.length >= 0:
		if f.length > maxDrain {
			r.keepAlive = false
			return nil
		}
		if answer != nil {
			_, err := io.CopyN(sink, br, f.length)
			return err
		}
		_, err := br.Discard(int(f.length))
		return err
	}
	// Delimited by the end of the connection.
	r.keepAlive = false
	_, err := io.Copy(sink, io.LimitReader(br, maxDrain))
	return err
}

// readLine returns one line without its CR LF. A line longer than the reader's buffer is an
// error.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: header line too long", errMalformedResponse)
		}
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// retryAfter parses a Retry-After header (delay seconds or an HTTP date) relative to now.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
