package publisher

import (
	"fmt"
	"strings"
)

// MarksMode is how delivered rows are recorded in outbox_events (docs/operations/marks.md, Done-marks).
type MarksMode string

// Marks modes.
const (
	// MarksDone updates each delivered row: status 'done', processed_at, retries. The default.
	MarksDone MarksMode = "done"
	// MarksOff records nothing: delivered rows keep status 'pending'. The slot's position is
	// still the truth of what was delivered; status and the skip of already delivered events
	// after a crash lose their input, and prune takes the rows once every slot confirmed them
	// (see docs/operations.md, Done-marks).
	MarksOff MarksMode = "off"
)

// ParseMarksMode reads a marks mode in any case; empty is MarksDone. Its error names the
// choices.
func ParseMarksMode(s string) (MarksMode, error) {
	switch m := MarksMode(strings.ToLower(s)); m {
	case "":
		return MarksDone, nil
	case MarksDone, MarksOff:
		return m, nil
	}
	return "", fmt.Errorf("unknown marks mode %q: use done or off", s)
}
