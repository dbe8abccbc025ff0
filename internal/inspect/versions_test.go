package inspect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
)

// TestStatusVersionColumns runs on every version CI covers (PG_VERSION): the columns a server
// lacks are nil, the ones it has are read, and an idle failover slot shows failover and
// inactive_since on 17+.
func TestStatusVersionColumns(t *testing.T) {
	_, pool := migrated(t)
	ctx := context.Background()
	var num int
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, "CREATE PUBLICATION "+pub+" FOR TABLE outbox_events WITH (publish = 'insert')")
	if num >= 170000 {
		exec(t, pool, "SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)", slot)
	} else {
		exec(t, pool, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	}
	r, err := inspect.Status(ctx, pool, "", slot, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.Server.VersionNum != num || r.Server.Version == "" || r.Server.InRecovery {
		t.Errorf("server = %+v, want version_num %d on a primary", r.Server, num)
	}
	s := r.Slot
	if got, want := s.Conflicting != nil, num >= 160000; got != want {
		t.Errorf("conflicting present = %v on %d, want %v", got, num, want)
	} else if got && *s.Conflicting {
		t.Errorf("conflicting = true for a fresh slot")
	}
	v17 := num >= 170000
	if (s.Failover != nil) != v17 || (s.Synced != nil) != v17 || (s.InactiveSince != nil) != v17 {
		t.Fatalf("on %d: failover %v synced %v inactive_since %v; want present iff 17+", num, s.Failover, s.Synced, s.InactiveSince)
	}
	if s.InvalidationReason != nil {
		t.Errorf("invalidation_reason = %q for a usable slot", *s.InvalidationReason)
	}
	if (r.Server.SynchronizedStandbySlots != nil) != v17 {
		t.Errorf("synchronized_standby_slots present = %v on %d", r.Server.SynchronizedStandbySlots != nil, num)
	}
	if (r.Server.IdleReplicationSlotTimeout != nil) != (num >= 180000) {
		t.Errorf("idle_replication_slot_timeout present = %v on %d", r.Server.IdleReplicationSlotTimeout != nil, num)
	}
	if v17 {
		if !*s.Failover || *s.Synced {
			t.Errorf("failover = %v synced = %v; want a failover slot, not synced (this is the primary)", *s.Failover, *s.Synced)
		}
		// The failover slot without synchronized_standby_slots is worth a warning.
		found := false
		for _, w := range r.Warnings() {
			found = found || strings.Contains(w, "synchronized_standby_slots is empty")
		}
		if !found {
			t.Errorf("warnings %q lack the empty synchronized_standby_slots warning", r.Warnings())
		}
	}
}
