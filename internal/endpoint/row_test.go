package endpoint

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Row decodes a row by column name, and a column it does not name is ignored: a column added to
// outbox_endpoints (and to schema.Tables, which the migrations test holds to the catalog) fails
// here until Row reads it.
func TestRowHasEveryColumnOfTheTable(t *testing.T) {
	var tags []string
	rt := reflect.TypeOf(Row{})
	for i := range rt.NumField() {
		tags = append(tags, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
	}
	var cols []string
	for _, tb := range schema.Tables {
		if tb.Name == schema.Endpoints {
			for _, c := range tb.Columns {
				cols = append(cols, c.Name)
			}
		}
	}
	if len(cols) == 0 || !slices.Equal(tags, cols) {
		t.Fatalf("Row's columns %v, the table's (schema.Tables) %v", tags, cols)
	}
}
