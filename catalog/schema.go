package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// compiled is a type's schema, ready to validate payloads. It is safe for concurrent use.
type compiled struct {
	s *jsonschema.Schema
}

// compile compiles a type's schema. No loader is set, so a $ref to anything outside the schema
// (a file, a URL) fails to compile instead of being fetched; the meta-schemas are built in.
func compile(name string, schema []byte) (*compiled, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("%w %s: schema is not valid JSON: %v", ErrInvalid, name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "urn:outbox-relay:event-type"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%w %s: schema: %v", ErrInvalid, name, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%w %s: schema does not compile as a JSON Schema: %s", ErrInvalid, name, oneLine(err.Error()))
	}
	return &compiled{s: s}, nil
}

var printer = message.NewPrinter(language.English)

// validate checks one JSON document; the error is a *PayloadError without its type's name.
func (c *compiled) validate(doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return &PayloadError{Reason: "it is not valid JSON: " + err.Error()}
	}
	err = c.s.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	leaf := deepest(ve)
	return &PayloadError{Pointer: pointer(leaf.InstanceLocation), Reason: leaf.ErrorKind.LocalizedString(printer)}
}

// deepest returns the cause that points deepest into the payload (the first of equals): the
// most precise place to show.
func deepest(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	best := e
	for _, c := range e.Causes {
		if d := deepest(c); len(d.InstanceLocation) > len(best.InstanceLocation) || best == e {
			best = d
		}
	}
	return best
}

// pointer is an RFC 6901 JSON pointer of a location ("" is the whole document).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// PayloadError is a payload that its event type's schema does not accept.
type PayloadError struct {
	// EventType is the event's type.
	EventType string
	// Pointer is the JSON pointer (RFC 6901) of the value at fault; "" is the whole payload.
	Pointer string
	// Reason is what is wrong there, as the schema validator words it.
	Reason string
}

func (e *PayloadError) Error() string {
	at := "the payload"
	if e.Pointer != "" {
		at = e.Pointer
	}
	if e.EventType == "" {
		return fmt.Sprintf("at %s: %s", at, e.Reason)
	}
	return fmt.Sprintf("payload of %s does not match its schema at %s: %s (`outbox-relay event-types list` shows the schema)",
		e.EventType, at, e.Reason)
}

// Unwrap returns ErrPayload.
func (e *PayloadError) Unwrap() error { return ErrPayload }
