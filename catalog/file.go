package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// ErrFile is wrapped by every error about a catalog file's content.
var ErrFile = errors.New("bad event-types file")

// A catalog file lists event types under event_types:
//
//	event_types:
//	  - name: order.created
//	    description: An order was placed.
//	    schema:                       # a JSON Schema, written as YAML (or as JSON: YAML reads it)
//	      type: object
//	      required: [order_id]
//	      properties:
//	        order_id: {type: string}
//	    example: {order_id: o-1}
//	  - name: order.cancelled
//	    deprecated: true
//	    replaced_by: order.canceled
type fileDoc struct {
	EventTypes []fileType `yaml:"event_types"`
}

type fileType struct {
	Name        string    `yaml:"name"`
	Description string    `yaml:"description"`
	Schema      yaml.Node `yaml:"schema"`
	Example     yaml.Node `yaml:"example"`
	Deprecated  bool      `yaml:"deprecated"`
	ReplacedBy  string    `yaml:"replaced_by"`
}

// ParseFile reads a catalog file (YAML, the shape above): every type is checked with Check,
// names must be unique, and a replaced_by must name a type of the file. Unknown keys are
// errors naming their line. Schemas and examples are turned into JSON as YAML reads them: a
// timestamp stays the string written, numbers keep their digits.
func ParseFile(b []byte) ([]Type, error) {
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	var doc fileDoc
	if err := d.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", ErrFile, err)
	}
	if len(doc.EventTypes) == 0 {
		return nil, fmt.Errorf("%w: no event_types: list the types under event_types:, each with a name", ErrFile)
	}
	seen := map[string]int{}
	out := make([]Type, 0, len(doc.EventTypes))
	for i, ft := range doc.EventTypes {
		t, err := ft.toType()
		if err != nil {
			return nil, fmt.Errorf("%w: event type #%d (%s): %w", ErrFile, i+1, ft.Name, err)
		}
		if t, err = Check(t); err != nil {
			return nil, fmt.Errorf("%w: event type #%d: %w", ErrFile, i+1, err)
		}
		if j, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("%w: event type #%d: %s is listed twice (#%d too)", ErrFile, i+1, t.Name, j)
		}
		seen[t.Name] = i + 1
		out = append(out, t)
	}
	for _, t := range out {
		if _, ok := seen[t.ReplacedBy]; t.ReplacedBy != "" && !ok {
			return nil, fmt.Errorf("%w: %s: replaced_by %s is not in the file: list it too", ErrFile, t.Name, t.ReplacedBy)
		}
	}
	return out, nil
}

func (ft fileType) toType() (Type, error) {
	t := Type{Name: ft.Name, Description: ft.Description, Deprecated: ft.Deprecated, ReplacedBy: ft.ReplacedBy}
	var err error
	if t.Schema, err = nodeJSON(&ft.Schema); err != nil {
		return t, fmt.Errorf("schema: %w", err)
	}
	if t.Example, err = nodeJSON(&ft.Example); err != nil {
		return t, fmt.Errorf("example: %w", err)
	}
	return t, nil
}

// nodeJSON is a YAML value as JSON; nil for a value left out.
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	v, err := nodeValue(n)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func nodeValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		return nodeValue(n.Content[0])
	case yaml.AliasNode:
		return nodeValue(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			v, err := nodeValue(c)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key must be a plain value", k.Line)
			}
			val, err := nodeValue(v)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	}
	return scalarValue(n)
}

// scalarValue reads a scalar by its resolved tag; a timestamp or anything else stays the text.
func scalarValue(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int", "!!float":
		if json.Valid([]byte(n.Value)) {
			return json.Number(n.Value), nil
		}
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return n.Value, nil
}
