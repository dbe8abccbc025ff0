package portal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/actor"
)

// caller calls the management API in-process for the signed-in actor: the request goes
// through the API's handler as any other (its routes, its rules, its audit, its metrics), the
// actor in its context taking the place of a bearer token. Every page reads and changes
// endpoints this way only, so the pages add no rule of their own.
type caller struct {
	api http.Handler
}

// apiError is an API answer of 4xx or 5xx: its problem, as the API words it.
type apiError struct {
	api.Problem
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Title, e.Detail) }

// field returns the problem's reason for the named field, or "".
func (e *apiError) field(name string) string {
	for _, f := range e.Errors {
		if f.Field == name {
			return f.Detail
		}
	}
	return ""
}

// call sends method path?query with body (nil: none; else JSON) for who, and decodes a 2xx
// answer into out (nil: discarded). Any other answer is an *apiError. headers are pairs.
func (c caller) call(ctx context.Context, who actor.Actor, method, path string, query url.Values, body, out any,
	headers ...string) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := "/api/v1" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(actor.With(ctx, who), method, u, http.NoBody)
	if err != nil {
		return err
	}
	req.Body = http.NoBody // as a server's request: never nil
	if rd != nil {
		req.Body, req.ContentLength = readCloser{rd}, int64(rd.Len())
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := &recorder{h: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 400 {
		e := &apiError{}
		if err := json.Unmarshal(rec.body.Bytes(), &e.Problem); err != nil || e.Status == 0 {
			e.Problem = api.Problem{Status: rec.status, Title: http.StatusText(rec.status), Detail: rec.body.String()}
		}
		return e
	}
	if out == nil || rec.body.Len() == 0 {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("read the answer of %s %s: %w", method, path, err)
	}
	return nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// recorder takes the API's answer.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
