package endpoint

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxPatternLen bounds one event-type pattern, in bytes.
const MaxPatternLen = 255

// MaxPatterns bounds the patterns of one endpoint (and its aggregate types).
const MaxPatterns = 100

// Kind is what a pattern matches.
type Kind uint8

const (
	// Exact matches one event type, byte for byte.
	Exact Kind = iota
	// Prefix matches every event type that starts with the pattern's text (which ends in '.')
	// and goes on after it: "order.*" has the text "order." and matches "order.created" and
	// "order.item.added", not "order" or "order.".
	Prefix
	// All matches every event type: the pattern "*".
	All
)

// Pattern is a parsed event-type pattern. Routing indexes endpoints by Kind and Text (a map
// for Exact, a prefix table for Prefix, a list for All) and calls Match only to check.
type Pattern struct {
	Kind Kind
	// Text is the event type (Exact), the prefix up to and including its last '.' (Prefix), or
	// empty (All).
	Text string
}

// ParsePattern parses one pattern: an event type ("order.created"), a prefix ("order.*") or
// "*". An event type is segments separated by '.', each at least one character, none of them
// '*', ',', a space or a control character. "*" stands only alone or as the whole last
// segment, so every pattern it accepts matches some event type. The error says why and what
// to write instead.
func ParsePattern(p string) (Pattern, error) {
	switch {
	case p == "*":
		return Pattern{Kind: All}, nil
	case p == "":
		return Pattern{}, errors.New("is empty: write an event type (order.created), a prefix (order.*) or * for every type")
	case len(p) > MaxPatternLen:
		return Pattern{}, fmt.Errorf("is %d bytes long, more than %d", len(p), MaxPatternLen)
	case !utf8.ValidString(p):
		return Pattern{}, errors.New("is not valid UTF-8")
	}
	body, kind := p, Exact
	if rest, ok := strings.CutSuffix(p, ".*"); ok {
		body, kind = rest, Prefix
	}
	if err := checkSegments(body); err != nil {
		return Pattern{}, err
	}
	if kind == Prefix {
		return Pattern{Kind: Prefix, Text: p[:len(p)-1]}, nil
	}
	return Pattern{Kind: Exact, Text: p}, nil
}

// checkSegments checks an event type, or a prefix pattern without its ".*".
func checkSegments(s string) error {
	if s == "" {
		return errors.New("has nothing before .*: write * for every type")
	}
	start := 0
	for i, r := range s {
		switch {
		case r == '*':
			return errors.New("has a * that is not a whole last segment: * matches the rest of a type (order.*), " +
				"it cannot stand inside a segment (a**, order*) or before one (*.created)")
		case r == ',':
			return errors.New("contains a comma: list several patterns as separate entries (order.*,invoice.paid on the command line)")
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("contains %q: patterns have no spaces or control characters", r)
		case r == '.':
			if i == start {
				return emptySegment(s, i)
			}
			start = i + 1
		}
	}
	if start == len(s) {
		return emptySegment(s, len(s)-1)
	}
	return nil
}

func emptySegment(s string, at int) error {
	if at == len(s)-1 && at > 0 {
		return fmt.Errorf("ends with '.', an empty segment no event type has: did you mean %s*?", s[:at+1])
	}
	return errors.New("has an empty segment (a '.' at the start or two in a row)")
}

// Match reports whether the event type t matches p. It does not allocate.
func (p Pattern) Match(t string) bool {
	switch p.Kind {
	case All:
		return true
	case Prefix:
		return len(t) > len(p.Text) && t[:len(p.Text)] == p.Text
	}
	return t == p.Text
}

// Match reports whether the event type t matches the pattern p, as ParsePattern(p).Match(t),
// without parsing and without allocating. p must be a pattern ParsePattern accepts (a stored
// endpoint's patterns are); for any other the answer means nothing.
func Match(p, t string) bool {
	switch {
	case p == "*":
		return true
	case len(p) >= 2 && p[len(p)-2:] == ".*":
		return len(t) >= len(p) && t[:len(p)-1] == p[:len(p)-1]
	}
	return p == t
}

// MatchAny reports whether t matches any of patterns. It does not allocate.
func MatchAny(patterns []string, t string) bool {
	for _, p := range patterns {
		if Match(p, t) {
			return true
		}
	}
	return false
}
