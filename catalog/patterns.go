package catalog

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// maxSuggestions is how many names an error suggests at most.
const maxSuggestions = 3

// UnknownPatternError is a pattern (or, from a Validator, an event type) that matches no type of
// a catalog that is not empty, with the nearest names.
type UnknownPatternError struct {
	// Pattern is the pattern or event type as given.
	Pattern string
	// Suggestions are the nearest names of the catalog (patterns, for a prefix pattern), nearest
	// first; empty when none is near.
	Suggestions []string
}

func (e *UnknownPatternError) Error() string {
	s := fmt.Sprintf("%q matches no event type in the catalog", e.Pattern)
	if len(e.Suggestions) > 0 {
		s += ": did you mean " + orList(e.Suggestions) + "?"
	}
	return s + " (`outbox-relay event-types list` lists them; a new type is added to the catalog first)"
}

// Unwrap returns ErrUnknownType.
func (e *UnknownPatternError) Unwrap() error { return ErrUnknownType }

func orList(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// CheckPatterns checks an endpoint's event-type patterns against the catalog types: with no
// types, nothing; else each pattern must match a type (an *UnknownPatternError per pattern that
// does not, joined), and a pattern that matches only deprecated types gives a warning naming
// them and their replacements. Patterns ParsePattern refuses are left to the endpoint rules.
func CheckPatterns(types []Type, patterns []string) (warnings []string, err error) {
	if len(types) == 0 {
		return nil, nil
	}
	var errs []error
	for _, p := range patterns {
		if _, perr := endpoint.ParsePattern(p); perr != nil {
			continue
		}
		var matched, live []Type
		for _, t := range types {
			if endpoint.Match(p, t.Name) {
				matched = append(matched, t)
				if !t.Deprecated {
					live = append(live, t)
				}
			}
		}
		switch {
		case len(matched) == 0:
			errs = append(errs, &UnknownPatternError{Pattern: p, Suggestions: Suggest(p, types)})
		case len(live) == 0:
			warnings = append(warnings, deprecatedWarning(p, matched))
		}
	}
	if len(errs) == 1 {
		return warnings, errs[0]
	}
	if len(errs) > 1 {
		return warnings, joined(errs)
	}
	return warnings, nil
}

// joined is several pattern errors in one, each findable with errors.As.
type joined []error

func (j joined) Error() string {
	s := make([]string, len(j))
	for i, e := range j {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (j joined) Unwrap() []error { return j }

func deprecatedWarning(p string, matched []Type) string {
	var parts []string
	for _, t := range matched {
		if t.ReplacedBy != "" {
			parts = append(parts, t.Name+" (use "+t.ReplacedBy+")")
		} else {
			parts = append(parts, t.Name)
		}
	}
	return fmt.Sprintf("event-type pattern %q matches only deprecated types: %s", p, strings.Join(parts, ", "))
}

// Suggest returns the catalog names nearest to p (at most three, nearest first, ties by name,
// none more than one edit behind the nearest): for an event type, the names within an edit
// distance that grows with its length (a quarter of it, at least 2; letters compared without
// case), and the prefix pattern "p.*" when p is the start of some names; for
// a prefix pattern ("ordr.*"), the prefix patterns of the catalog's names within that distance.
func Suggest(p string, types []Type) []string {
	prefix := strings.HasSuffix(p, ".*")
	cands := map[string]bool{}
	for _, t := range types {
		if !prefix {
			cands[t.Name] = true
		}
		for i := range len(t.Name) {
			if t.Name[i] == '.' {
				cands[t.Name[:i]+".*"] = true
			}
		}
	}
	if !prefix && cands[p+".*"] {
		return []string{p + ".*"}
	}
	limit := max(2, len(p)/4)
	type scored struct {
		name string
		d    int
	}
	var near []scored
	lp := strings.ToLower(p)
	for c := range cands {
		if strings.HasSuffix(c, ".*") != prefix {
			continue
		}
		if d := distance(lp, strings.ToLower(c)); d <= limit {
			near = append(near, scored{c, d})
		}
	}
	slices.SortFunc(near, func(a, b scored) int { return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.name, b.name)) })
	var out []string
	for _, s := range near[:min(len(near), maxSuggestions)] {
		if s.d > near[0].d+1 { // far behind the nearest: noise
			break
		}
		out = append(out, s.name)
	}
	return out
}

// distance is the optimal string alignment distance of a and b, in bytes: insertions,
// deletions, substitutions and transpositions of neighbours each cost 1 ("ordr" to "order" is
// 1, "oredr" to "order" is 1).
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func sortStrings(s []string) { slices.Sort(s) }
