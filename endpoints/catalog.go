package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// ErrUnknownEventType is wrapped by an *UnknownPatternError: an event-type pattern that matches
// no type of an event-type catalog that is not empty (catalog.ErrUnknownType is the same value).
var ErrUnknownEventType = errors.New("not in the event-type catalog")

// UnknownPatternError is an event-type pattern (or, from catalog.Validator, an event type) that
// matches no type of a catalog that is not empty, with the nearest names. Add and Update wrap
// it with ErrInvalid; errors.As finds it (catalog.UnknownPatternError is the same type).
type UnknownPatternError struct {
	// Pattern is the pattern or event type as given.
	Pattern string
	// Suggestions are the nearest names of the catalog (prefix patterns, for a prefix pattern),
	// nearest first; empty when none is near.
	Suggestions []string
}

func (e *UnknownPatternError) Error() string {
	s := fmt.Sprintf("%q matches no event type in the catalog", e.Pattern)
	if n := len(e.Suggestions); n > 0 {
		list := e.Suggestions[0]
		if n > 1 {
			list = strings.Join(e.Suggestions[:n-1], ", ") + " or " + e.Suggestions[n-1]
		}
		s += ": did you mean " + list + "?"
	}
	return s + " (`outbox-relay event-types list` lists them; a new type is added to the catalog first)"
}

// Unwrap returns ErrUnknownEventType.
func (e *UnknownPatternError) Unwrap() error { return ErrUnknownEventType }

// UnknownPatterns turns what endpoint.CheckKnown found into one error: nil, one
// *UnknownPatternError, or several joined (errors.As finds the first).
func unknownPatterns(unknown []endpoint.Unknown) error {
	errs := make([]error, len(unknown))
	for i, u := range unknown {
		errs[i] = &UnknownPatternError{Pattern: u.Pattern, Suggestions: u.Suggestions}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

const (
	// catalogExistsSQL tells whether the catalog's table exists, so that a database migrated
	// before it is an empty catalog instead of an error that would abort the transaction.
	catalogExistsSQL = `SELECT to_regclass($1) IS NOT NULL`
	// catalogNamesSQL reads what the pattern check needs of every type: no schema, no example.
	catalogNamesSQL = `SELECT coalesce(json_agg(json_build_object('name', name, 'deprecated', deprecated,
    'replaced_by', coalesce(replaced_by, '')) ORDER BY name), '[]'::json)::text FROM {outbox_event_types}`
)

// checkCatalog checks the patterns of after that before did not have against the event-type
// catalog (outbox_event_types): nothing when it is empty or does not exist; a pattern that
// matches no type is refused with ErrInvalid and an *UnknownPatternError naming the nearest
// names; a pattern that matches only deprecated types is a warning. Patterns kept from before
// are not checked again, so a type removed from the catalog later does not block an unrelated
// change of the endpoint.
func (e Store) checkCatalog(ctx context.Context, q Querier, before, after []string) ([]string, error) {
	var added []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			added = append(added, p)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	types, err := e.knownTypes(ctx, q)
	if err != nil {
		return nil, err
	}
	warnings, unknown := endpoint.CheckKnown(types, added)
	if len(unknown) > 0 {
		return nil, endpoint.Field("event_types", fmt.Errorf("%w: event-type pattern %w", ErrInvalid, unknownPatterns(unknown)))
	}
	return warnings, nil
}

// knownTypes reads the catalog's names; none when its table does not exist.
func (e Store) knownTypes(ctx context.Context, q Querier) ([]endpoint.KnownType, error) {
	var exists bool
	if err := q.QueryRow(ctx, catalogExistsSQL, schema.Qualify(e.Schema, schema.EventTypes)).Scan(&exists); err != nil {
		return nil, e.dbError("read the event-type catalog", err)
	}
	if !exists {
		return nil, nil
	}
	var text string
	if err := q.QueryRow(ctx, schema.SQL(e.Schema, catalogNamesSQL)).Scan(&text); err != nil {
		return nil, e.dbError("read the event-type catalog", err)
	}
	var rows []struct {
		Name       string `json:"name"`
		Deprecated bool   `json:"deprecated"`
		ReplacedBy string `json:"replaced_by"`
	}
	if err := json.Unmarshal([]byte(text), &rows); err != nil {
		return nil, fmt.Errorf("endpoints: read the event-type catalog: %w", err)
	}
	out := make([]endpoint.KnownType, len(rows))
	for i, r := range rows {
		out[i] = endpoint.KnownType(r)
	}
	return out, nil
}
