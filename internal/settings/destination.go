package settings

import (
	"errors"
	"fmt"
)

// ErrDestination is wrapped by OneDestination's errors.
var ErrDestination = errors.New("a pipeline has exactly one destination (webhook, nats, kafka or endpoints)")

// OneDestination is the rule every configuration form keeps (the run flags, a pipelines file,
// relay.Config and relay.Pipeline): a pipeline has exactly one destination. given names the
// destinations that are set, in the caller's own words (a flag, a YAML key, a Go field), so
// that the error points at what the user wrote; the error names the first two and the fix.
func OneDestination(given ...string) error {
	switch len(given) {
	case 0:
		return fmt.Errorf("%w, and none is set: give webhook (url and secret), nats, kafka or endpoints: true", ErrDestination)
	case 1:
		return nil
	}
	return fmt.Errorf("both %s and %s are set: %w; drop one", given[0], given[1], ErrDestination)
}
