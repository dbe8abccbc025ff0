package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// body is a request's JSON object, field by field, as sent: readBody checks the object and its
// field names, and each field is decoded by the handler that knows its type (field), so a
// wrong type is refused with the field's name and null is told apart from absent.
type body map[string]json.RawMessage

// readBody reads r's body, at most the API's limit, as a JSON object whose fields are all in
// known. An empty body is an empty object when emptyOK.
func (a *API) readBody(w http.ResponseWriter, r *http.Request, known []string, emptyOK bool) (body, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != jsonMediaType && !strings.HasSuffix(mt, "+json")) {
			return nil, problem(http.StatusUnsupportedMediaType, typeMediaType,
				fmt.Sprintf("Content-Type %q: send the body as application/json", ct))
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, problem(http.StatusRequestEntityTooLarge, typeTooLarge,
			fmt.Sprintf("the body is larger than %d bytes, the API's limit", a.cfg.MaxBodyBytes))
	}
	if err != nil {
		return nil, problem(http.StatusBadRequest, typeMalformed, "the body could not be read: "+err.Error())
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if emptyOK {
			return body{}, nil
		}
		return nil, problem(http.StatusBadRequest, typeMalformed, "the body is empty: send a JSON object")
	}
	var b body
	d := json.NewDecoder(bytes.NewReader(raw))
	if err := d.Decode(&b); err != nil || d.More() || b == nil {
		return nil, problem(http.StatusBadRequest, typeMalformed, "the body is not a JSON object: "+jsonReason(err))
	}
	var unknown []FieldIssue
	for k := range b {
		if !slices.Contains(known, k) {
			unknown = append(unknown, FieldIssue{Field: k, Detail: "unknown field: the fields are " + strings.Join(known, ", ")})
		}
	}
	if len(unknown) > 0 {
		slices.SortFunc(unknown, func(x, y FieldIssue) int { return strings.Compare(x.Field, y.Field) })
		return nil, problem(http.StatusBadRequest, typeMalformed, "the body has fields this route does not take", unknown...)
	}
	return b, nil
}

func jsonReason(err error) string {
	if err == nil {
		return "one JSON object is expected"
	}
	return err.Error()
}

// has reports whether the body sets name (null included).
func (b body) has(name string) bool { _, ok := b[name]; return ok }

// null reports whether the body sets name to null.
func (b body) null(name string) bool {
	v, ok := b[name]
	return ok && string(bytes.TrimSpace(v)) == "null"
}

// field decodes name into v when the body has it and it is not null; a wrong type is refused
// with the field's name. It reports whether it decoded.
func (b body) field(name string, v any, want string) (bool, error) {
	raw, ok := b[name]
	if !ok || b.null(name) {
		return false, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return false, problem(http.StatusBadRequest, typeMalformed, "a field has the wrong type",
			FieldIssue{Field: name, Detail: "want " + want})
	}
	return true, nil
}

// issues collects field problems, to refuse them all at once.
type issues []FieldIssue

func (is *issues) add(field, detail string) {
	*is = append(*is, FieldIssue{Field: field, Detail: detail})
}

// err returns a problem of status and typ with the collected issues, or nil.
func (is issues) err(status int, typ, detail string) error {
	if len(is) == 0 {
		return nil
	}
	return problem(status, typ, detail, is...)
}

// queryLimit reads the limit parameter: DefaultLimit when absent, 1 to MaxLimit.
func queryLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: "limit", Detail: fmt.Sprintf("want a whole number from 1 to %d (default %d)", MaxLimit, DefaultLimit)})
	}
	return n, nil
}

// queryTime reads an RFC 3339 time parameter; zero when absent.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: name, Detail: "want an RFC 3339 time, e.g. 2026-03-03T10:00:00Z"})
	}
	return t, nil
}

// unknownParams refuses query parameters a route does not take, so a misspelt filter is not
// silently ignored.
func unknownParams(r *http.Request, known ...string) error {
	var is issues
	for k := range r.URL.Query() {
		if !slices.Contains(known, k) {
			detail := "unknown parameter"
			if len(known) > 0 {
				detail += ": this route takes " + strings.Join(known, ", ")
			}
			is.add(k, detail)
		}
	}
	slices.SortFunc(is, func(x, y FieldIssue) int { return strings.Compare(x.Field, y.Field) })
	return is.err(http.StatusBadRequest, typeMalformed, "a query parameter is refused")
}

// encodeCursor and decodeCursor make a page's position opaque: base64url of a small JSON
// object. A cursor only says where a listing goes on; whatever it holds, the listing stays
// within what the caller may see.
func encodeCursor(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(r *http.Request, v any) (bool, error) {
	s := r.URL.Query().Get("cursor")
	if s == "" {
		return false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		err = d.Decode(v)
	}
	if err != nil {
		return false, problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: "cursor", Detail: "not a cursor this listing gave: pass next_cursor of the previous page as it is"})
	}
	return true, nil
}
