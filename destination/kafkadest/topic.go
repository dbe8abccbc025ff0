package kafkadest

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// template is a parsed topic template: literal text and placeholders.
type template []part

type part struct {
	lit   string
	field string // "" for a literal
}

var placeholders = map[string]bool{"{aggregate_type}": true, "{aggregate_id}": true, "{event_type}": true}

// parseTemplate checks a topic template: only known placeholders, and literal text of the
// characters Kafka allows in a topic name.
func parseTemplate(s string) (template, error) {
	bad := func(why string) error {
		return fmt.Errorf("kafka: topic template %q %s; placeholders are {aggregate_type}, {aggregate_id}, {event_type}, e.g. %s",
			s, why, DefaultTopic)
	}
	if s == "" || len(s) > 249 {
		return nil, bad("is empty or longer than 249 characters")
	}
	var t template
	for rest := s; rest != ""; {
		i := strings.IndexByte(rest, '{')
		lit := rest
		if i >= 0 {
			lit = rest[:i]
		}
		for j := 0; j < len(lit); j++ {
			if !topicChar(lit[j]) {
				return nil, bad(fmt.Sprintf("has %q: a topic name takes ASCII letters, digits, '.', '_' and '-'", lit[j]))
			}
		}
		if lit != "" {
			t = append(t, part{lit: lit})
		}
		if i < 0 {
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, bad("has an unclosed '{'")
		}
		name := rest[i : i+j+1]
		if !placeholders[name] {
			return nil, bad("has an unknown placeholder " + name)
		}
		t = append(t, part{field: name})
		rest = rest[i+j+1:]
	}
	return t, nil
}

func topicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// expand returns the topic of m.
func (t template) expand(m *envelope.Message) string {
	var b strings.Builder
	for _, p := range t {
		var v string
		switch p.field {
		case "":
			b.WriteString(p.lit)
			continue
		case "{aggregate_type}":
			v = m.AggregateType
		case "{aggregate_id}":
			v = m.AggregateID
		case "{event_type}":
			v = m.EventType
		}
		if v == "" {
			b.WriteByte('_')
			continue
		}
		for i := 0; i < len(v); i++ {
			c := v[i]
			if !topicChar(c) {
				c = '_'
			}
			b.WriteByte(c)
		}
	}
	out := b.String()
	if len(out) > 249 {
		out = out[:249]
	}
	return out
}
