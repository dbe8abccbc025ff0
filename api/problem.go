package api

import (
	"encoding/json"
	"net/http"
)

// Problem is an error answer, RFC 9457 application/problem+json. Type is a stable identifier
// (urn:outbox-relay:problem:<name>, listed in docs/guides/api.md) a client can switch on; Title
// says the kind in a few words, Detail what went wrong and what to do, in words a team can show
// its customer as they are (the CLI's words for the same refusal); Errors, for a request whose
// fields are refused, names each field with its reason.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldIssue `json:"errors,omitempty"`
}

// FieldIssue is one field of a request and why it is refused: Field is its JSON name (or the
// query parameter's), Detail the reason.
type FieldIssue struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// The problem types. Each is documented in docs/guides/api.md, and the OpenAPI document lists
// them.
const (
	problemPrefix     = "urn:outbox-relay:problem:"
	typeInvalid       = problemPrefix + "invalid"      // 422: a field breaks a rule
	typeMalformed     = problemPrefix + "malformed"    // 400: not JSON, a wrong type, an unknown field, a bad parameter
	typeTooLarge      = problemPrefix + "too-large"    // 413: the body passes the limit
	typeMediaType     = problemPrefix + "media-type"   // 415: not application/json
	typeUnauthorized  = problemPrefix + "unauthorized" // 401
	typeForbidden     = problemPrefix + "forbidden"    // 403: an operator's route
	typeNotFound      = problemPrefix + "not-found"    // 404
	typeMethod        = problemPrefix + "method"       // 405
	typeExists        = problemPrefix + "exists"       // 409: the id is taken
	typeState         = problemPrefix + "state"        // 409: the endpoint's state does not allow it
	typeKeyReused     = problemPrefix + "idempotency-key-reused"
	typeNothing       = problemPrefix + "nothing-to-replay" // 422: recover or resend selects nothing
	typeInternal      = problemPrefix + "internal"          // 500
	typeUnavailable   = problemPrefix + "unavailable"       // 503: the database cannot be reached
	problemMediaType  = "application/problem+json"
	jsonMediaType     = "application/json"
	maxProblemDetails = 20 // field issues in one answer
)

var titles = map[string]string{
	typeInvalid:      "The request breaks a rule",
	typeMalformed:    "The request cannot be read",
	typeTooLarge:     "The request body is too large",
	typeMediaType:    "The request body is not JSON",
	typeUnauthorized: "Unauthorized",
	typeForbidden:    "Forbidden",
	typeNotFound:     "Not found",
	typeMethod:       "Method not allowed",
	typeExists:       "It exists already",
	typeState:        "The endpoint's state does not allow this",
	typeKeyReused:    "The Idempotency-Key was used for another request",
	typeNothing:      "Nothing to re-send",
	typeInternal:     "The request failed on the server",
	typeUnavailable:  "The database is unavailable",
}

func problem(status int, typ, detail string, issues ...FieldIssue) *Problem {
	if len(issues) > maxProblemDetails {
		issues = issues[:maxProblemDetails]
	}
	return &Problem{Type: typ, Title: titles[typ], Status: status, Detail: detail, Errors: issues}
}

func (p *Problem) Error() string { return p.Title + ": " + p.Detail }

// writeProblem answers p.
func writeProblem(w http.ResponseWriter, p *Problem) {
	h := w.Header()
	h.Set("Content-Type", problemMediaType)
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="outbox-relay"`)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, problem(http.StatusInternalServerError, typeInternal, "the answer does not encode: "+err.Error()))
		return
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", jsonMediaType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
