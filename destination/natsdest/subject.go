package natsdest

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// template is a parsed subject template: literal text and placeholders.
type template struct {
	parts []part
	raw   string
}

type part struct {
	lit   string
	field int // 0: literal; else one of the field constants
}

const (
	fieldAggregateType = iota + 1
	fieldAggregateID
	fieldEventType
)

var placeholders = map[string]int{
	"{aggregate_type}": fieldAggregateType,
	"{aggregate_id}":   fieldAggregateID,
	"{event_type}":     fieldEventType,
}

// parseTemplate checks a subject template: tokens separated by '.', none empty, no whitespace,
// wildcards only as whole tokens ('>' last), and only known placeholders.
func parseTemplate(s string) (template, error) {
	t := template{raw: s}
	bad := func(why string) error {
		return fmt.Errorf("nats: subject template %q %s; placeholders are {aggregate_type}, {aggregate_id}, {event_type}, e.g. %s",
			s, why, DefaultSubject)
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return t, bad("contains whitespace")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return t, bad("has an empty token (a leading, trailing or doubled '.')")
		}
		if strings.ContainsAny(tok, "*>") {
			return t, bad("contains a wildcard: a message is published to one subject")
		}
	}
	for rest := s; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return t, bad("has a '}' without '{'")
			}
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if i > 0 {
			if strings.IndexByte(rest[:i], '}') >= 0 {
				return t, bad("has a '}' without '{'")
			}
			t.parts = append(t.parts, part{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return t, bad("has an unclosed '{'")
		}
		name := rest[i : i+j+1]
		f, ok := placeholders[name]
		if !ok {
			return t, bad("has an unknown placeholder " + name)
		}
		t.parts = append(t.parts, part{field: f})
		rest = rest[i+j+1:]
	}
	return t, nil
}

// expand returns the subject of m.
func (t template) expand(m *envelope.Message) string {
	var b strings.Builder
	for _, p := range t.parts {
		switch p.field {
		case 0:
			b.WriteString(p.lit)
		case fieldAggregateType:
			writeToken(&b, m.AggregateType)
		case fieldAggregateID:
			writeToken(&b, m.AggregateID)
		case fieldEventType:
			writeToken(&b, m.EventType)
		}
	}
	return b.String()
}

// writeToken writes v with each character NATS forbids in a subject token (whitespace, '.',
// '*', '>', and other control characters) replaced by '_'; an empty value is written as '_'.
func writeToken(b *strings.Builder, v string) {
	if v == "" {
		b.WriteByte('_')
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' {
			c = '_'
		}
		b.WriteByte(c)
	}
}

// wildcard is the subject filter every expansion matches: each token that holds a placeholder
// becomes '*'.
func (t template) wildcard() string {
	toks := strings.Split(t.raw, ".")
	for i, tok := range toks {
		if strings.ContainsRune(tok, '{') {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}
