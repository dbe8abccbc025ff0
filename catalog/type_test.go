package catalog

import (
	"errors"
	"strings"
	"testing"
)

const orderSchema = `{"type": "object", "required": ["order_id", "items"], "properties": {
  "order_id": {"type": "string"},
  "items": {"type": "array", "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}}}}}`

func TestCheckRefusesBadTypesWithTheReason(t *testing.T) {
	ok := Type{Name: "order.created", Schema: []byte(orderSchema), Example: []byte(`{"order_id": "o-1", "items": []}`)}
	if _, err := Check(ok); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	for _, tt := range []struct {
		name   string
		change func(*Type)
		reason string
	}{
		{"no name", func(t *Type) { t.Name = "" }, "is empty"},
		{"a pattern as name", func(t *Type) { t.Name = "order.*" }, "is a pattern"},
		{"a space", func(t *Type) { t.Name = "order created" }, "no spaces"},
		{"an empty segment", func(t *Type) { t.Name = "order..created" }, "empty segment"},
		{"schema not JSON", func(t *Type) { t.Schema = []byte(`{"type":`) }, "schema is not valid JSON"},
		{"schema not a schema", func(t *Type) { t.Schema = []byte(`{"type": "thing"}`) }, "does not compile as a JSON Schema"},
		{"a remote $ref is not fetched", func(t *Type) { t.Schema = []byte(`{"$ref": "https://schemas.example/order.json"}`) }, "does not compile"},
		{"a file $ref is not read", func(t *Type) { t.Schema = []byte(`{"$ref": "file:///etc/passwd"}`) }, "does not compile"},
		{"example refused by the schema", func(t *Type) { t.Example = []byte(`{"order_id": 7, "items": []}`) }, "the example does not match the schema: at /order_id"},
		{"replaced_by without deprecated", func(t *Type) { t.ReplacedBy = "order.placed" }, "set deprecated too"},
		{"replaces itself", func(t *Type) { t.Deprecated, t.ReplacedBy = true, t.Name }, "cannot replace itself"},
		{"NUL in the example", func(t *Type) { t.Schema, t.Example = nil, []byte(`{"a": "\u0000"}`) }, "NUL"},
		{"description too long", func(t *Type) { t.Description = strings.Repeat("d", MaxDescriptionLen+1) }, "more than 4096"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := ok
			tt.change(&bad)
			_, err := Check(bad)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Check = %v, want ErrInvalid saying %q", err, tt.reason)
			}
		})
	}
}

// A payload refused is refused with the JSON pointer of the value at fault, the deepest one
// the validator names.
func TestPayloadErrorsPointAtTheValue(t *testing.T) {
	s, err := compile("order.created", []byte(orderSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		payload, pointer, reason string
	}{
		{`{"order_id": "o-1", "items": [{"sku": "a"}, {"qty": 2}]}`, "/items/1", "sku"},
		{`{"order_id": "o-1", "items": [{"sku": "a", "qty": 0}]}`, "/items/0/qty", "minimum"},
		{`{"items": []}`, "", "order_id"},
		{`[1]`, "", "object"},
		{`{"order_id": "o-1", "items": [], "a/b~c": 1}`, "", ""}, // additional properties are allowed
	} {
		err := s.validate([]byte(tt.payload))
		if tt.reason == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tt.payload, err)
			}
			continue
		}
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Pointer != tt.pointer || !strings.Contains(pe.Reason, tt.reason) {
			t.Errorf("%s: %#v, want pointer %q and a reason naming %q", tt.payload, err, tt.pointer, tt.reason)
		}
	}
	if got := pointer([]string{"a/b", "c~d", "0"}); got != "/a~1b/c~0d/0" {
		t.Errorf("pointer = %q", got)
	}
}
