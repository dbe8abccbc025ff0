package endpoint

import (
	"cmp"
	"slices"
	"strings"
)

// KnownType is what the pattern check needs of a type of the event-type catalog.
type KnownType struct {
	Name       string
	Deprecated bool
	ReplacedBy string // empty: none named
}

// Unknown is a pattern that matches no known type, with the nearest names (Suggest).
type Unknown struct {
	Pattern     string
	Suggestions []string
}

// CheckKnown checks an endpoint's patterns against the catalog's types: with no types,
// nothing; else each pattern that matches no type is in unknown, with its nearest names, and a
// pattern that matches only deprecated types gives a warning naming them and their
// replacements. Patterns ParsePattern refuses are left to Validate.
func CheckKnown(types []KnownType, patterns []string) (warnings []string, unknown []Unknown) {
	if len(types) == 0 {
		return nil, nil
	}
	for _, p := range patterns {
		if _, err := ParsePattern(p); err != nil {
			continue
		}
		var matched []KnownType
		live := false
		for _, t := range types {
			if Match(p, t.Name) {
				matched = append(matched, t)
				live = live || !t.Deprecated
			}
		}
		switch {
		case len(matched) == 0:
			names := make([]string, len(types))
			for i, t := range types {
				names[i] = t.Name
			}
			unknown = append(unknown, Unknown{Pattern: p, Suggestions: Suggest(p, names)})
		case !live:
			warnings = append(warnings, deprecatedWarning(p, matched))
		}
	}
	return warnings, unknown
}

func deprecatedWarning(p string, matched []KnownType) string {
	parts := make([]string, len(matched))
	for i, t := range matched {
		parts[i] = t.Name
		if t.ReplacedBy != "" {
			parts[i] += " (use " + t.ReplacedBy + ")"
		}
	}
	return "event-type pattern \"" + p + "\" matches only deprecated types: " + strings.Join(parts, ", ")
}

// maxSuggestions is how many names Suggest returns at most.
const maxSuggestions = 3

// Suggest returns the names nearest to p (at most three, nearest first, ties by name, none more
// than one edit behind the nearest): for an event type, the names within an edit distance that
// grows with its length (a quarter of it, at least 2; letters compared without case), and the
// prefix pattern "p.*" when p is the start of some names; for a prefix pattern ("ordr.*"), the
// prefix patterns of the names within that distance.
func Suggest(p string, names []string) []string {
	prefix := strings.HasSuffix(p, ".*")
	cands := map[string]bool{}
	for _, n := range names {
		if !prefix {
			cands[n] = true
		}
		for i := range len(n) {
			if n[i] == '.' {
				cands[n[:i]+".*"] = true
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
