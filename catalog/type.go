package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// Errors of the catalog; each is wrapped with the type's name and the reason.
var (
	// ErrInvalid is wrapped by every refusal of bad input (a malformed name, a schema that does
	// not compile, an example the schema refuses), detected before anything is written.
	ErrInvalid = errors.New("invalid event type")
	// ErrNotFound is returned for a name no type has.
	ErrNotFound = errors.New("no event type has this name")
	// ErrUnknownType is wrapped by an *UnknownPatternError: a pattern that matches no type of a
	// catalog that is not empty, or (Validator) an event type the catalog does not hold. It is
	// endpoints.ErrUnknownEventType.
	ErrUnknownType = endpoints.ErrUnknownEventType
	// ErrPayload is wrapped by a *PayloadError: a payload its type's schema does not accept.
	ErrPayload = errors.New("payload does not match its event type's schema")
)

// Bounds of a type's fields (in bytes of compact JSON for the schema and the example).
const (
	MaxNameLen        = endpoint.MaxPatternLen
	MaxDescriptionLen = 4096
	MaxSchemaLen      = 256 << 10
	MaxExampleLen     = 64 << 10
)

// Type is one event type: a row of outbox_event_types. The JSON names are the column names.
type Type struct {
	// Name is the event type, as Event.EventType carries it: segments separated by '.', no '*',
	// spaces, commas or control characters, at most MaxNameLen bytes. Required.
	Name string `json:"name"`
	// Description says what happened when an event of this type is sent. Empty: none.
	Description string `json:"description"`
	// Schema is a JSON Schema the payload must match (draft 2020-12 unless $schema names
	// another). Nil: any payload.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Example is an example payload, valid against Schema. Nil: none.
	Example json.RawMessage `json:"example,omitempty"`
	// Deprecated marks a type that should no longer be subscribed to: a pattern that matches
	// only deprecated types is accepted with a warning.
	Deprecated bool `json:"deprecated"`
	// ReplacedBy, for a deprecated type, names the type to use instead. Empty: none named.
	ReplacedBy string `json:"replaced_by,omitempty"`
	// CreatedAt and UpdatedAt are the database's times of the insert and the last change; the
	// writes ignore them.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Check checks t as every write does, without the database: the name, the description, the
// schema (it must compile), the example (the schema must accept it), and ReplacedBy (a
// deprecated type's, another name). It returns t with Schema and Example compact, as stored.
// Whether ReplacedBy exists is checked by the writes, which see the catalog.
func Check(t Type) (Type, error) {
	if err := CheckName(t.Name); err != nil {
		return t, err
	}
	switch {
	case len(t.Description) > MaxDescriptionLen:
		return t, fmt.Errorf("%w %s: description is %d bytes long, more than %d", ErrInvalid, t.Name, len(t.Description), MaxDescriptionLen)
	case !utf8.ValidString(t.Description) || strings.IndexByte(t.Description, 0) >= 0:
		return t, fmt.Errorf("%w %s: description is not valid UTF-8 text", ErrInvalid, t.Name)
	case t.ReplacedBy != "" && !t.Deprecated:
		return t, fmt.Errorf("%w %s: replaced_by %q is for a deprecated type: set deprecated too", ErrInvalid, t.Name, t.ReplacedBy)
	case t.ReplacedBy == t.Name && t.Name != "":
		return t, fmt.Errorf("%w %s: a type cannot replace itself (replaced_by names the type to use instead)", ErrInvalid, t.Name)
	}
	if t.ReplacedBy != "" {
		if err := CheckName(t.ReplacedBy); err != nil {
			return t, fmt.Errorf("%w %s: replaced_by: %w", ErrInvalid, t.Name, err)
		}
	}
	var err error
	if t.Schema, err = compactJSON(t.Name, "schema", t.Schema, MaxSchemaLen); err != nil {
		return t, err
	}
	if t.Example, err = compactJSON(t.Name, "example", t.Example, MaxExampleLen); err != nil {
		return t, err
	}
	if t.Schema == nil {
		return t, nil
	}
	s, err := compile(t.Name, t.Schema)
	if err != nil {
		return t, err
	}
	if t.Example != nil {
		if err := s.validate(t.Example); err != nil {
			return t, fmt.Errorf("%w %s: the example does not match the schema: %w", ErrInvalid, t.Name, err)
		}
	}
	return t, nil
}

// CheckName checks an event type's name: what outbox-relay accepts as an event-type pattern
// that matches exactly one type.
func CheckName(name string) error {
	p, err := endpoint.ParsePattern(name)
	switch {
	case err != nil:
		return fmt.Errorf("%w: name %q %w", ErrInvalid, name, err)
	case p.Kind != endpoint.Exact:
		return fmt.Errorf("%w: name %q is a pattern: a type's name is one event type, e.g. order.created", ErrInvalid, name)
	}
	return nil
}

// compactJSON returns v compact, nil for none (empty or JSON null), or the reason it is not
// one JSON value of at most limit bytes that PostgreSQL's jsonb can store.
func compactJSON(name, field string, v json.RawMessage, limit int) (json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, fmt.Errorf("%w %s: %s is not valid JSON: %v", ErrInvalid, name, field, err)
	}
	switch {
	case b.Len() > limit:
		return nil, fmt.Errorf("%w %s: %s is %d bytes of compact JSON, more than %d", ErrInvalid, name, field, b.Len(), limit)
	case bytes.Contains(b.Bytes(), []byte(`\u0000`)):
		return nil, fmt.Errorf("%w %s: %s contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store", ErrInvalid, name, field)
	}
	return b.Bytes(), nil
}
