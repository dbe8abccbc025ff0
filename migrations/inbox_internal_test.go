package migrations

import (
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The inbox set checks a table it adopts against the columns schema.Tables gives inbox_events
// in version 1, each with its type here: a column without a type, or a type for a column
// schema.Tables does not list, is a drift between the two lists.
func TestInboxColumnTypes(t *testing.T) {
	cols := schema.FirstColumns(schema.Inbox)
	if len(cols) == 0 {
		t.Fatal("schema.Tables lists no inbox_events columns")
	}
	for _, c := range inboxEventsColumns() {
		if c.typ == "" {
			t.Errorf("inbox_events.%s has no type in inboxColumnTypes", c.name)
		}
	}
	for name := range inboxColumnTypes {
		if !slices.Contains(cols, name) {
			t.Errorf("inboxColumnTypes has %s, which schema.Tables does not give inbox_events in version 1", name)
		}
	}
}
