package inbox

import (
	"errors"
	"net/http"
)

// The errors a delivery can be refused with. Verify, ParseEvent and the Handler's logs wrap them
// with detail; test for them with errors.Is. StatusCode maps each to its HTTP answer.
var (
	// ErrMissingSignature means the request carries no signature header, or lacks the id or
	// timestamp header its scheme signs.
	ErrMissingSignature = errors.New("missing signature")
	// ErrBadSignature means no signature in the request matches any configured secret.
	ErrBadSignature = errors.New("signature does not match any configured secret")
	// ErrStaleTimestamp means the signature is genuine but its timestamp is further from now
	// than the tolerance, in the past or in the future: a replay, or a skewed clock.
	ErrStaleTimestamp = errors.New("timestamp outside tolerance")
	// ErrBodyTooLarge means the body exceeds the configured maximum.
	ErrBodyTooLarge = errors.New("body too large")
	// ErrMalformed means a request that cannot be an event: an event id that is not a uuid, a
	// body that is not JSON (or that PostgreSQL refuses as jsonb), a bad timestamp or attempt.
	ErrMalformed = errors.New("malformed event")
	// ErrForbidden means the sender's address is outside Config.AllowedNetworks.
	ErrForbidden = errors.New("sender not allowed")
	// ErrUnsupported means a request in a form the inbox does not read: a Content-Encoding
	// other than gzip, or a CloudEvents structured-mode single event.
	ErrUnsupported = errors.New("unsupported request format")
)

// Failures after verification, kept unexported: the sender only needs the status code.
var (
	errHandler  = errors.New("handler failed")
	errDatabase = errors.New("database unavailable")
)

// StatusCode returns the HTTP status the Handler answers for err: 200 for nil, 403 for
// ErrForbidden, 415 for ErrUnsupported, 413 for ErrBodyTooLarge, 401 for ErrMissingSignature, ErrBadSignature and ErrStaleTimestamp, 400 for
// ErrMalformed, 503 for a database failure and 500 for anything else (a handler's error). A
// consumer that calls Verify and ParseEvent itself can answer with it.
func StatusCode(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrUnsupported):
		return http.StatusUnsupportedMediaType
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrMissingSignature), errors.Is(err, ErrBadSignature), errors.Is(err, ErrStaleTimestamp):
		return http.StatusUnauthorized
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, errDatabase):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// clip shortens a header value quoted in an error, so a hostile request cannot fill the logs.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
