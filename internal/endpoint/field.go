package endpoint

import "errors"

// FieldError names the field of an endpoint (its column name, which is also its name in the
// CLI's --json and the API's JSON) that a refusal is about, so the API can point at it. Its
// text is the refusal's own: the CLI, the Go API and the API say the same words.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Field wraps err as being about field; nil stays nil, and an error already naming a field
// keeps its own.
func Field(field string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: field, Err: err}
}

// FieldOf returns the field err is about, or "".
func FieldOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}
