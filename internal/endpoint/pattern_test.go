package endpoint

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestParsePatternRefusesPatternsThatCanNeverMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, reason string
	}{
		{"", "is empty"},
		{"order.", "ends with '.', an empty segment no event type has: did you mean order.*?"},
		{".order", "has an empty segment"},
		{"order..created", "has an empty segment"},
		{".", "has an empty segment"},
		{".*", "has nothing before .*"},
		{"*.created", "has a * that is not a whole last segment"},
		{"a**", "has a * that is not a whole last segment"},
		{"order*", "has a * that is not a whole last segment"},
		{"order.*.created", "has a * that is not a whole last segment"},
		{"order.**", "has a * that is not a whole last segment"},
		{"**", "has a * that is not a whole last segment"},
		{"order.created,invoice.paid", "contains a comma"},
		{"order created", "contains ' ': patterns have no spaces"},
		{" order.created", "contains ' '"},
		{"order.created\n", "contains '\\n'"},
		{"order\x00", "contains '\\x00'"},
		{"\xff", "is not valid UTF-8"},
		{strings.Repeat("a", MaxPatternLen+1), "more than 255"},
	} {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := ParsePattern(tt.pattern)
			if err == nil {
				t.Fatalf("ParsePattern(%q) accepted it", tt.pattern)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("ParsePattern(%q) = %q, want the reason %q", tt.pattern, err, tt.reason)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, eventType string
		want               bool
	}{
		{"*", "order.created", true},
		{"*", "x", true},
		{"order.created", "order.created", true},
		{"order.created", "order.created.v2", false},
		{"order.created", "Order.created", false},
		{"order.created", "order", false},
		{"order.*", "order.created", true},
		{"order.*", "order.item.added", true},
		{"order.*", "order", false},
		{"order.*", "order.", false},
		{"order.*", "orders.created", false},
		{"order.*", "xorder.created", false},
		{"a.b.*", "a.b.c", true},
		{"a.b.*", "a.bc", false},
		{"invoice.paid", "invoice.paid", true},
		{"ünïcode.*", "ünïcode.ok", true},
	} {
		p, err := ParsePattern(tt.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.pattern, err)
		}
		if got := p.Match(tt.eventType); got != tt.want {
			t.Errorf("Pattern(%q).Match(%q) = %v, want %v", tt.pattern, tt.eventType, got, tt.want)
		}
		if got := Match(tt.pattern, tt.eventType); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.eventType, got, tt.want)
		}
	}
}

// Routing calls the matcher for every event and endpoint candidate: it must not allocate.
func TestMatchDoesNotAllocate(t *testing.T) {
	patterns := []string{"invoice.paid", "order.*", "*"}
	p, _ := ParsePattern("order.*")
	r := Row{TenantID: "acme", EventTypes: patterns, AggregateTypes: []string{"order"}}
	ok := true
	allocs := testing.AllocsPerRun(1000, func() {
		ok = ok && Match("order.*", "order.created") && MatchAny(patterns, "x.y") && p.Match("order.created") &&
			r.Subscribed("acme", "order.created", "order")
	})
	if !ok {
		t.Fatal("a match that should hold did not (the measurement would mean nothing)")
	}
	if allocs != 0 {
		t.Fatalf("matching allocates %.1f times per run, want 0", allocs)
	}
}

func TestSubscribed(t *testing.T) {
	tenantless := Row{EventTypes: []string{"order.*"}}
	acme := Row{TenantID: "acme", EventTypes: []string{"*"}, AggregateTypes: []string{"order"}}
	for _, tt := range []struct {
		name                   string
		r                      Row
		tenant, typ, aggregate string
		want                   bool
	}{
		{"a tenantless endpoint takes a tenant's event", tenantless, "acme", "order.created", "order", true},
		{"a tenantless endpoint takes an event without tenant", tenantless, "", "order.created", "order", true},
		{"outside the patterns", tenantless, "", "invoice.paid", "invoice", false},
		{"the endpoint's tenant", acme, "acme", "order.created", "order", true},
		{"another tenant", acme, "globex", "order.created", "order", false},
		{"an event without tenant skips a tenant's endpoint", acme, "", "order.created", "order", false},
		{"an aggregate type not listed", acme, "acme", "order.created", "invoice", false},
	} {
		if got := tt.r.Subscribed(tt.tenant, tt.typ, tt.aggregate); got != tt.want {
			t.Errorf("%s: Subscribed(%q, %q, %q) = %v, want %v", tt.name, tt.tenant, tt.typ, tt.aggregate, got, tt.want)
		}
	}
}

// reference is the matcher spelled out as a regular expression, for the fuzzer to compare.
func reference(p string) *regexp.Regexp {
	switch {
	case p == "*":
		return regexp.MustCompile(`(?s)^.*$`)
	case strings.HasSuffix(p, ".*"):
		return regexp.MustCompile(`(?s)^` + regexp.QuoteMeta(strings.TrimSuffix(p, "*")) + `.+$`)
	}
	return regexp.MustCompile(`(?s)^` + regexp.QuoteMeta(p) + `$`)
}

// FuzzPattern checks, for any pattern and event type: ParsePattern never panics; every pattern
// it accepts matches some event type (it can match); Match, Pattern.Match and a regular
// expression agree; and the refused patterns are exactly those the grammar excludes.
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"*", "order.*", "order.created", "order.", "*.x", "a**", "", ".", "a..b", "ü.*", "a,b"} {
		f.Add(s, "order.created")
		f.Add(s, s)
		f.Add(s, strings.TrimSuffix(s, "*"))
	}
	f.Fuzz(func(t *testing.T, pattern, eventType string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			if grammar(pattern) {
				t.Fatalf("ParsePattern(%q) refused a pattern of the grammar: %v", pattern, err)
			}
			return
		}
		if !grammar(pattern) {
			t.Fatalf("ParsePattern(%q) accepted a pattern outside the grammar", pattern)
		}
		witness := strings.TrimSuffix(pattern, "*") + "x"
		if p.Kind == Exact {
			witness = pattern
		}
		if !p.Match(witness) || !Match(pattern, witness) {
			t.Fatalf("pattern %q matches nothing, not even %q", pattern, witness)
		}
		want := reference(pattern).MatchString(eventType)
		if got := p.Match(eventType); got != want {
			t.Fatalf("Pattern(%q).Match(%q) = %v, the regexp says %v", pattern, eventType, got, want)
		}
		if got := Match(pattern, eventType); got != want {
			t.Fatalf("Match(%q, %q) = %v, the regexp says %v", pattern, eventType, got, want)
		}
	})
}

// grammar is the pattern grammar written independently of ParsePattern, the table's CHECK
// (outbox_endpoints_event_types_check) in Go: * | seg(.seg)*(.*)? where a segment is one or
// more characters other than '*', ',', '.', a space or a control character.
var grammarRE = regexp.MustCompile(`^(\*|[^*,.\s\p{Cc}]+(\.[^*,.\s\p{Cc}]+)*(\.\*)?)$`)

func grammar(p string) bool {
	if len(p) > MaxPatternLen || !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsSpace) {
		return false
	}
	return grammarRE.MatchString(p)
}

// BenchmarkMatch measures the per-candidate check routing runs for each event: a prefix, an
// exact and a wildcard pattern against one event type.
func BenchmarkMatch(b *testing.B) {
	patterns := []string{"invoice.paid", "order.*", "*"}
	b.ReportAllocs()
	for b.Loop() {
		if !MatchAny(patterns, "order.created") {
			b.Fatal("no match")
		}
	}
}

// BenchmarkSubscribed measures a whole subscription check (tenant, patterns, aggregate types)
// that does not match until the last pattern.
func BenchmarkSubscribed(b *testing.B) {
	r := Row{TenantID: "acme", EventTypes: []string{"invoice.paid", "invoice.*", "customer.*", "order.*"},
		AggregateTypes: []string{"invoice", "order"}}
	b.ReportAllocs()
	for b.Loop() {
		if !r.Subscribed("acme", "order.created", "order") {
			b.Fatal("no match")
		}
	}
}
