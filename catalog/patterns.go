package catalog

import (
	"errors"
	"slices"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// UnknownPatternError is a pattern (or, from a Validator, an event type) that matches no type of
// a catalog that is not empty, with the nearest names. It is endpoints.UnknownPatternError: the
// endpoint rules refuse with it, and package endpoints does not link this package's JSON Schema
// library (outbox, which producers import, still links endpoints for its deprecated names).
type UnknownPatternError = endpoints.UnknownPatternError

// CheckPatterns checks an endpoint's event-type patterns against the catalog types: with no
// types, nothing; else each pattern must match a type (an *UnknownPatternError per pattern that
// does not, joined), and a pattern that matches only deprecated types gives a warning naming
// them and their replacements. Patterns the endpoint rules refuse as patterns are left to them.
// The endpoint rules (endpoints.Store.Add, Update) make the same check.
func CheckPatterns(types []Type, patterns []string) (warnings []string, err error) {
	warnings, unknown := endpoint.CheckKnown(known(types), patterns)
	errs := make([]error, len(unknown))
	for i, u := range unknown {
		errs[i] = &UnknownPatternError{Pattern: u.Pattern, Suggestions: u.Suggestions}
	}
	if len(errs) == 1 {
		return warnings, errs[0]
	}
	return warnings, errors.Join(errs...)
}

// Suggest returns the catalog names nearest to p (at most three, nearest first, ties by name,
// none more than one edit behind the nearest): for an event type, the names within an edit
// distance that grows with its length (a quarter of it, at least 2; letters compared without
// case), and the prefix pattern "p.*" when p is the start of some names; for a prefix pattern
// ("ordr.*"), the prefix patterns of the catalog's names within that distance.
func Suggest(p string, types []Type) []string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t.Name
	}
	return endpoint.Suggest(p, names)
}

func known(types []Type) []endpoint.KnownType {
	out := make([]endpoint.KnownType, len(types))
	for i, t := range types {
		out[i] = endpoint.KnownType{Name: t.Name, Deprecated: t.Deprecated, ReplacedBy: t.ReplacedBy}
	}
	return out
}

func sortStrings(s []string) { slices.Sort(s) }
