package inspect_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestStatusOfAStreamedSlot(t *testing.T) {
	dsn, pool := migrated(t)
	createSlot(t, pool)
	pid := holdSlot(t, dsn)
	insert(t, pool, "order", "1", "done", 2*time.Hour)
	oldest := insert(t, pool, "order", "1", "pending", time.Hour)
	insert(t, pool, "order", "2", "pending", time.Minute)
	failed := insert(t, pool, "order", "3", "failed", 30*time.Minute)
	insert(t, pool, "order", "3", "parked", 20*time.Minute)
	insert(t, pool, "order", "3", "parked", 10*time.Minute)
	park(t, pool, "order", "3", failed, "HTTP 400: unknown order", 30*time.Minute)

	r, err := inspect.Status(context.Background(), pool, "", slot, 10)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Slot
	if !s.Exists || !s.Active || !s.SameDatabase || s.Plugin != "pgoutput" {
		t.Fatalf("slot = %+v, want an existing, active pgoutput slot of this database", s)
	}
	if s.ActivePID == nil || *s.ActivePID != pid {
		t.Errorf("active_pid = %v, want the streaming backend %d", s.ActivePID, pid)
	}
	if s.WALStatus == nil || *s.WALStatus != "reserved" {
		t.Errorf("wal_status = %v, want reserved", s.WALStatus)
	}
	if s.ConfirmedFlushLSN == nil || s.RestartLSN == nil || s.RetainedWALBytes == nil || s.LagBytes == nil {
		t.Fatalf("slot positions missing: %+v", s)
	}
	// The inserts came after the slot's creation and nothing confirmed them.
	if *s.LagBytes <= 0 || *s.RetainedWALBytes < *s.LagBytes {
		t.Errorf("lag %d bytes, retained %d bytes: want lag > 0 and retained >= lag", *s.LagBytes, *s.RetainedWALBytes)
	}
	if s.SafeWALSize != nil {
		t.Errorf("safe_wal_size = %d, want nil (max_slot_wal_keep_size is unlimited)", *s.SafeWALSize)
	}
	want := map[string]int64{"pending": 2, "done": 1, "failed": 1, "parked": 2}
	for k, v := range want {
		if r.Rows[k] != v {
			t.Errorf("rows[%s] = %d, want %d (all: %v)", k, r.Rows[k], v, r.Rows)
		}
	}
	if p := r.OldestPending; p == nil || p.ID != oldest || math.Abs(p.AgeSeconds-3600) > 60 {
		t.Errorf("oldest pending = %+v, want %s about 3600s old", p, oldest)
	}
	if r.ParkedAggregates != 1 || len(r.Parked) != 1 {
		t.Fatalf("parked = %d %+v, want one", r.ParkedAggregates, r.Parked)
	}
	p := r.Parked[0]
	if p.AggregateType != "order" || p.AggregateID != "3" || p.FirstEventID != failed ||
		p.Reason != "HTTP 400: unknown order" || p.ParkedEvents != 2 {
		t.Errorf("parked[0] = %+v", p)
	}
	if ok, why := r.Healthy(); !ok {
		t.Errorf("unhealthy: %s", why)
	}
}

func TestStatusUnhealthy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, pool *pgxpool.Pool)
		reason  string
	}{
		{"missing slot", func(*testing.T, *pgxpool.Pool) {}, "does not exist"},
		{"inactive slot", createSlot, "is inactive"},
		{"invalidated slot", invalidate, "was invalidated"},
		{"slot of another database", func(t *testing.T, _ *pgxpool.Pool) {
			_, other := migrated(t)
			createSlot(t, other)
		}, "not a pgoutput slot of this one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pool := migrated(t)
			tc.prepare(t, pool)
			r, err := inspect.Status(context.Background(), pool, "", slot, 10)
			if err != nil {
				t.Fatal(err)
			}
			ok, why := r.Healthy()
			if ok || !strings.Contains(why, tc.reason) {
				t.Fatalf("Healthy() = %v %q, want false with %q", ok, why, tc.reason)
			}
		})
	}
}

// invalidate creates the slot and makes it lose its WAL: max_slot_wal_keep_size is lowered,
// then WAL written and checkpoints run until the server gives the slot up.
func invalidate(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	createSlot(t, pool)
	exec(t, pool, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
	exec(t, pool, "SELECT pg_reload_conf()")
	t.Cleanup(func() {
		_, _ = pool.Exec(ctx, "ALTER SYSTEM RESET max_slot_wal_keep_size")
		_, _ = pool.Exec(ctx, "SELECT pg_reload_conf()")
	})
	exec(t, pool, "CREATE TABLE filler (x int)")
	relaytest.WaitFor(t, 30*time.Second, "slot invalidated", func() bool {
		exec(t, pool, "INSERT INTO filler SELECT generate_series(1, 20000)")
		exec(t, pool, "SELECT pg_switch_wal()")
		exec(t, pool, "CHECKPOINT")
		var status string
		_ = pool.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&status)
		return status == "lost"
	})
	r, err := inspect.Status(ctx, pool, "", slot, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.Slot.RestartLSN != nil || r.Slot.RetainedWALBytes != nil || r.Slot.ConfirmedFlushLSN == nil {
		t.Errorf("lost slot: restart_lsn %v, retained %v, confirmed %v: want nil, nil and a position",
			r.Slot.RestartLSN, r.Slot.RetainedWALBytes, r.Slot.ConfirmedFlushLSN)
	}
}

func TestStatusWithoutSchema(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = inspect.Status(context.Background(), pool, "", slot, 10)
	if !errors.Is(err, inspect.ErrNoSchema) || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("err = %v, want ErrNoSchema saying to migrate", err)
	}
}

func TestStatusListsOldestParkedFirst(t *testing.T) {
	_, pool := migrated(t)
	for i, agg := range []string{"new", "old", "middle"} {
		first := insert(t, pool, "order", agg, "failed", time.Hour)
		park(t, pool, "order", agg, first, "reason "+agg, time.Duration([]int{1, 3, 2}[i])*time.Hour)
	}
	r, err := inspect.Status(context.Background(), pool, "", slot, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.ParkedAggregates != 3 || len(r.Parked) != 2 || r.Parked[0].AggregateID != "old" || r.Parked[1].AggregateID != "middle" {
		t.Fatalf("parked = %d %+v, want 3 in all, listing old then middle", r.ParkedAggregates, r.Parked)
	}
	r, err = inspect.Status(context.Background(), pool, "", slot, 0)
	if err != nil || len(r.Parked) != 0 || r.ParkedAggregates != 3 {
		t.Fatalf("top 0: %v %d %+v, want the count and no list", err, r.ParkedAggregates, r.Parked)
	}
}
