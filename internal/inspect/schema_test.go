package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Status checks the schema the relay needs, and each way it can be wrong names its own fix.
func TestCheckSchemaNamesTheFix(t *testing.T) {
	for _, tc := range []struct {
		name, alter string
		want        error
		fix         string
	}{
		{"migrated", "", nil, ""},
		{"older version", fmt.Sprintf("DROP TABLE outbox_slot_location; ALTER TABLE outbox_reshard DROP COLUMN fence_reached_at; "+
			"DELETE FROM goose_db_version WHERE version_id = %d", migrations.Latest()),
			inspect.ErrNoSchema, "run `outbox-relay migrate`"},
		{"column renamed by hand", "ALTER TABLE outbox_events RENAME COLUMN event_type TO kind", inspect.ErrNoSchema,
			fmt.Sprintf("event_type missing although goose_db_version records version %d", migrations.Latest())},
		{"foreign table", "DROP TABLE goose_db_version; DROP TABLE outbox_events; " +
			"CREATE TABLE outbox_events (id bigserial PRIMARY KEY, topic text)", inspect.ErrForeignTable, "RENAME TO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pool := migrated(t)
			if tc.alter != "" {
				exec(t, pool, tc.alter)
			}
			err := inspect.CheckSchema(context.Background(), pool)
			t.Log(err)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.fix) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.want, tc.fix)
			}
		})
	}
}
