package relay

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// startShards runs the default pipeline with endpoints in two shards, in this process, and
// waits for both shards' slots.
func (e *env) startShards(mutate func(*Config)) *running {
	e.t.Helper()
	r := e.startNoWait(func(c *Config) {
		endpointsConfig(c)
		c.Shards = 2
		if mutate != nil {
			mutate(c)
		}
	})
	waitFor(e.t, 30*time.Second, "both shards' slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	return r
}

// maxInWindow returns the most times of ts (sorted) in any window of length d.
func maxInWindow(ts []time.Time, d time.Duration) int {
	most := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for j < len(ts) && ts[j].Before(ts[i].Add(d)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// An endpoint's rate_limit and max_in_flight hold across the shards together: each shard takes
// its share. Measured at the receivers: the requests to the rate-limited endpoint in any 10 s
// are at most 10 times its rate_limit (with a 10% margin for the network between the limiter
// and the receiver), and the capped endpoint never has more requests under way than its
// max_in_flight. Each shard taking the whole limits, the 120 events would arrive within about
// 6 s, and up to 4 requests at once.
func TestShardedEndpointLimitsHoldTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rated := newPartner(t, "rated", func(string, string, string) bool { return true })
	capped := newPartner(t, "capped", func(string, string, string) bool { return true })
	e.addPartner(rated, endpoints.Endpoint{RateLimit: 10})
	e.addPartner(capped, endpoints.Endpoint{MaxInFlight: 2})
	var under, most atomic.Int64
	capped.recv.SetFail(func(*http.Request) int {
		n := under.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond)
		under.Add(-1)
		return 0
	})
	e.startShards(nil)
	e.write("l", tenantEvents{"", "order", "order.created", 30, 4}, []*partner{rated, capped})
	waitPartners(t, rated, capped)
	var at []time.Time
	for _, d := range rated.recv.Deliveries() {
		at = append(at, d.At)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if n := maxInWindow(at, 10*time.Second); n > 110 {
		t.Fatalf("%d requests in 10 s to the endpoint with rate_limit 10 over 2 shards: want at most 100 (110 with the margin)", n)
	}
	if m := most.Load(); m > 2 {
		t.Fatalf("%d requests under way at once to the endpoint with max_in_flight 2 over 2 shards", m)
	}
	if m := most.Load(); m < 2 {
		t.Fatalf("at most %d request under way to the capped endpoint: the count sees the shards' requests overlap", m) // (its positive control)
	}
}

// shardAggregates returns aggregate ids of type order, one for each of n shards.
func (e *env) shardAggregates(prefix string, n int) []string {
	e.t.Helper()
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		var shard int
		if err := e.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT %s FROM (SELECT 'order'::text AS aggregate_type, $1::text AS aggregate_id) r`,
			ShardExpr(n)), id).Scan(&shard); err != nil {
			e.t.Fatal(err)
		}
		if out[shard] == "" {
			out[shard], found = id, found+1
		}
	}
	return out
}

// Both shards of a pipeline get a 410 Gone from the same endpoint at the same moment, and both
// disable it: one conditional update wins, and the operator's webhook gets one
// endpoint.disabled, not one per shard.
func TestShardedEndpointDisabledOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone := newPartner(t, "gone", func(string, string, string) bool { return true })
	e.addPartner(gone, endpoints.Endpoint{})
	var arrived atomic.Int64
	both := make(chan struct{})
	var once sync.Once
	gone.recv.SetFail(func(*http.Request) int {
		if arrived.Add(1) >= 2 {
			once.Do(func() { close(both) })
		}
		select { // each shard's request waits for the other's: both answered 410 at once
		case <-both:
		case <-time.After(30 * time.Second):
		}
		return http.StatusGone
	})
	op := newOperatorEvents(t)
	var logs relaytest.SyncBuffer
	r := e.startShards(func(c *Config) { op.configure(c); logTo(&logs, t)(c) })
	for _, agg := range e.shardAggregates("g", 2) {
		if _, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: agg,
			EventType: "order.created", Payload: map[string]int{"seq": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "both shards disabled the endpoint, or found it disabled", func() bool {
		l := logs.String()
		return strings.Count(l, "endpoint disabled automatically: it answered 410 Gone")+
			strings.Count(l, "endpoint disabled already by another relay") == 2
	})
	if ep, err := (endpoints.Store{}).Get(context.Background(), e.pool, gone.id); err != nil || ep.State != endpoints.Disabled {
		t.Fatalf("endpoint %+v, %v: want it disabled", ep, err)
	}
	if err := r.stop(t); err != nil { // the operator's queue is delivered before Run returns
		t.Fatal(err)
	}
	if n := len(op.of("endpoint.disabled", gone.id)); n != 1 {
		t.Fatalf("%d endpoint.disabled notifications for one disable by two shards, want 1", n)
	}
	if n := counterSum(r, "outbox_relay_endpoint_transitions_total", "transition", "disabled"); n != 1 {
		t.Fatalf("disabled transitions over the shards = %v, want 1", n)
	}
}

// counterSum sums a counter's series with the label (name, value) over the relay's registry.
func counterSum(r *running, name, label, value string) float64 {
	families, err := r.reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label, value) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// Both shards of a pipeline see an endpoint fail until their circuit breakers open, then
// recover: the operator's webhook gets one endpoint.recovered, not one per shard (the shard that
// ends the recorded outage reports it; the other logs that it was reported).
func TestShardedEndpointRecoveredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flaky := newPartner(t, "flaky", func(string, string, string) bool { return true })
	e.addPartner(flaky, endpoints.Endpoint{})
	var logs relaytest.SyncBuffer
	opened := func() int { return strings.Count(logs.String(), "its circuit breaker opened") }
	flaky.recv.SetFail(func(*http.Request) int {
		if opened() < 2 { // fails until both shards' breakers opened
			return http.StatusServiceUnavailable
		}
		return 0
	})
	op := newOperatorEvents(t)
	r := e.startShards(func(c *Config) { c.MaxAttempts = -1; op.configure(c); logTo(&logs, t)(c) })
	for _, agg := range e.shardAggregates("f", 2) {
		for seq := 1; seq <= 2; seq++ {
			if _, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: agg,
				EventType: "order.created", Payload: map[string]int{"seq": seq}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 60*time.Second, "both shards saw the endpoint recover", func() bool {
		return strings.Count(logs.String(), "endpoint recovered: its circuit breaker closed") == 2
	})
	waitFor(t, 30*time.Second, "a shard reported the recovery", func() bool { return len(op.of("endpoint.recovered", flaky.id)) >= 1 })
	if err := r.stop(t); err != nil { // the operator's queue is delivered before Run returns
		t.Fatal(err)
	}
	if n := len(op.of("endpoint.recovered", flaky.id)); n != 1 {
		t.Fatalf("%d endpoint.recovered notifications for one recovery seen by two shards, want 1", n)
	}
	if n := strings.Count(logs.String(), "another shard or relay saw it first"); n != 1 {
		t.Fatalf("%d shards logged that another reported the recovery, want 1", n)
	}
	if n := counterSum(r, "outbox_relay_endpoint_transitions_total", "transition", "recovered"); n != 1 {
		t.Fatalf("recovered transitions over the shards = %v, want 1", n)
	}
	if n := counterSum(r, "outbox_relay_endpoint_transitions_total", "transition", "circuit_opened"); n != 2 {
		t.Fatalf("circuit_opened transitions over the shards = %v, want 2 (each shard's breaker opened)", n)
	}
}

// A one-destination pipeline's rate_limit holds across its shards together, as an endpoint's
// does: each shard takes its share. With the whole limit each, the 120 events would arrive
// within about 6 s, 120 in one 10 s window.
func TestShardedPipelineRateLimitHoldsTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startNoWait(func(c *Config) {
		c.Pipelines = []Pipeline{{Name: "orders", Shards: 2, Slot: e.slot, WebhookURL: e.recv.URL, Secrets: []string{secret},
			RateLimit: 10}}
	})
	waitFor(t, 30*time.Second, "both shards' slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	res := e.produce(relaytest.Workload{Events: 120, Aggregates: 40, MaxTxSize: 4})
	if rep := e.waitDelivered(res, 60*time.Second); len(rep.Lost) != 0 {
		t.Fatalf("%d events lost", len(rep.Lost))
	}
	var at []time.Time
	for _, d := range e.recv.Deliveries() {
		at = append(at, d.At)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if n := maxInWindow(at, 10*time.Second); n > 110 {
		t.Fatalf("%d requests in 10 s to a destination with rate_limit 10 over 2 shards: want at most 100 (110 with the margin)", n)
	}
	if len(at) < 120 {
		t.Fatalf("%d requests, want every one of the 120 events", len(at)) // (the window's positive control)
	}
}
