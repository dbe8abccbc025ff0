package inspect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestPollerSetsGauges(t *testing.T) {
	dsn, pool := migrated(t)
	createSlot(t, pool)
	counts := map[string]int{"pending": 3, "done": 5, "failed": 1, "parked": 2}
	var failed string
	for status, n := range counts {
		for i := 0; i < n; i++ {
			id := insert(t, pool, "order", "7", status, time.Minute)
			if status == "failed" {
				failed = id
			}
		}
	}
	park(t, pool, "order", "7", failed, "HTTP 422", time.Minute)
	// The live-tuple statistic that the done estimate uses is flushed by an idle backend up to
	// 10 s late, but always when it exits.
	pool.Reset()

	m := metrics.New(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	p := inspect.NewPoller(pool, "", slot, m, 20*time.Millisecond, zerolog.New(zerolog.NewTestWriter(t)))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	}()

	gauges := func() string {
		s := fmt.Sprintf("active=%v retained>0=%v", gaugeValue(m.SlotActive), gaugeValue(m.SlotRetainedWAL) > 0)
		for _, status := range []string{"pending", "done", "failed", "parked"} {
			s += fmt.Sprintf(" %s=%v", status, gaugeValue(m.OutboxRows.WithLabelValues(status)))
		}
		return s
	}
	want := "active=0 retained>0=true pending=3 done=5 failed=1 parked=2"
	relaytest.WaitFor(t, 10*time.Second, want, func() bool { return gauges() == want })

	holdSlot(t, dsn)
	relaytest.WaitFor(t, 10*time.Second, "slot_active 1", func() bool { return gaugeValue(m.SlotActive) == 1 })
}

func TestPollerMissingSlotReadsInactive(t *testing.T) {
	_, pool := migrated(t)
	m := metrics.New(prometheus.NewRegistry())
	m.SlotActive.Set(1)
	m.SlotRetainedWAL.Set(123)
	p := inspect.NewPoller(pool, "", "no_such_slot", m, 0, zerolog.Nop())
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a, r := gaugeValue(m.SlotActive), gaugeValue(m.SlotRetainedWAL); a != 0 || r != 0 {
		t.Fatalf("slot_active %v, retained %v; want 0 and 0 for a missing slot", a, r)
	}
}

func TestPollerReportsMissingTable(t *testing.T) {
	_, pool := migrated(t)
	exec(t, pool, "DROP TABLE outbox_events")
	p := inspect.NewPoller(pool, "", slot, nil, 0, zerolog.Nop())
	if err := p.Poll(context.Background()); err == nil {
		t.Fatal("Poll succeeded without outbox_events")
	}
}
