package endpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// checkCatalog checks the patterns of after that before did not have against the event-type
// catalog (catalog.Catalog.CheckPatterns): nothing when the catalog is empty; a pattern that
// matches no type is refused with ErrInvalid and the nearest names (errors.As finds the
// *catalog.UnknownPatternError); a pattern that matches only deprecated types is a warning.
// Patterns kept from before are not checked again, so a type removed from the catalog later
// does not block an unrelated change of the endpoint.
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
	warnings, err := catalog.Catalog{Schema: e.Schema}.CheckPatterns(ctx, q, added)
	if errors.Is(err, catalog.ErrUnknownType) {
		return nil, endpoint.Field("event_types", fmt.Errorf("%w: event-type pattern %w", ErrInvalid, err))
	}
	return warnings, err
}
