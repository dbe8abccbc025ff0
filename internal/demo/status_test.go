package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
)

func TestQuantileInterpolatesInsideTheBucket(t *testing.T) {
	h := hist{bounds: []float64{0.001, 0.002, 0.004, 0.008}, counts: []uint64{50, 90, 99, 100}, total: 100}
	tests := []struct {
		name string
		h    hist
		q    float64
		want time.Duration
		ok   bool
	}{
		{"median in the first bucket", h, 0.5, time.Millisecond, true},
		{"p99 at a bucket's top", h, 0.99, 4 * time.Millisecond, true},
		{"p995 halfway through the last bucket", h, 0.995, 6 * time.Millisecond, true},
		{"p25 halfway through the first bucket", h, 0.25, 500 * time.Microsecond, true},
		{"beyond the last bound", hist{bounds: []float64{1}, counts: []uint64{0}, total: 4}, 0.99, time.Second, true},
		{"no observations", hist{bounds: []float64{1}, counts: []uint64{0}}, 0.99, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.h.quantile(tt.q)
			if ok != tt.ok || (got-tt.want).Abs() > time.Microsecond {
				t.Fatalf("quantile(%v) = %v, %v; want %v, %v", tt.q, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestHistSinceCountsOnlyNewObservations(t *testing.T) {
	old := hist{bounds: []float64{1, 2}, counts: []uint64{10, 10}, total: 10}
	now := hist{bounds: []float64{1, 2}, counts: []uint64{10, 20}, total: 20}
	got, _ := now.since(old).quantile(0.5)
	if got != 1500*time.Millisecond {
		t.Fatalf("median of the window = %v, want 1.5s (the old fast samples are gone)", got)
	}
}

// readRelay must find the relay's real series, under their real names.
func TestReadRelayFromTheRelaysRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := metrics.NewRecorder(reg)
	relay.RegisterMetrics(rec)
	rec.Collector("outbox_relay_events_delivered_total").(prometheus.Counter).Add(7)
	attempts := rec.Collector("outbox_relay_delivery_attempts_total").(*prometheus.CounterVec)
	attempts.WithLabelValues(publisher.ResultSuccess).Add(7)
	attempts.WithLabelValues(publisher.Result5xx).Add(3)
	attempts.WithLabelValues(publisher.ResultTimeout).Add(1)
	rec.Collector("outbox_relay_replication_lag_bytes").(prometheus.Gauge).Set(2048)
	endToEnd := rec.Collector("outbox_relay_end_to_end_seconds").(prometheus.Histogram)
	for i := 0; i < 100; i++ {
		endToEnd.Observe(0.003)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s sample
	s.readRelay(families)
	if s.delivered != 7 || s.retries != 4 || s.lagBytes != 2048 {
		t.Fatalf("delivered=%d retries=%d lag=%d, want 7, 4, 2048", s.delivered, s.retries, s.lagBytes)
	}
	if p99, ok := s.e2e.quantile(0.99); !ok || p99 < 2*time.Millisecond || p99 > 4*time.Millisecond {
		t.Fatalf("p99 = %v, %v; want within the 2-4ms bucket", p99, ok)
	}
}

func TestStatusFitsAndSummarises(t *testing.T) {
	start := time.Unix(1000, 0)
	w := window{
		base:    sample{at: start},
		now:     sample{at: start.Add(10 * time.Second), written: 500, delivered: 480, duplicates: 9, reservations: 480, retries: 120, lagBytes: 3 << 20, failing: true, outageLeft: 3 * time.Second},
		elapsed: 42 * time.Second,
	}
	for _, nats := range []bool{false, true} {
		nw := w
		nw.now.nats = nats
		lines := nw.block("12:00:00 consumer failing on purpose for 4s; the relay retries")
		for _, l := range lines {
			if n := len([]rune(l)); n >= 80 {
				t.Errorf("status line of %d columns wraps on an 80-column terminal: %q", n, l)
			}
		}
		want := map[bool]string{false: "  consumer      FAILING on purpose", true: "  broker        DOWN: nats-server killed"}[nats]
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("nats=%v: status lacks %q:\n%s", nats, want, strings.Join(lines, "\n"))
		}
	}
	line := w.line()
	for _, want := range []string{"written=500", "delivered=480", "duplicates_absorbed=9", "reservations=480", "retries=120", "lag=3.0MiB", "consumer=failing"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line lacks %s: %s", want, line)
		}
	}
	got := summary(sample{written: 5, delivered: 5, reservations: 5}, 6*time.Second)
	if want := "demo: written=5 delivered=5 big_orders=0 duplicates_absorbed=0 reservations=5 retries=0 p99=n/a elapsed=6s"; got != want {
		t.Errorf("summary = %q\nwant      %q", got, want)
	}
}

func TestScreenRedrawsInPlace(t *testing.T) {
	var sc screen
	first := sc.draw([]string{"a", "b"})
	if strings.Contains(first, "\x1b[2A") {
		t.Errorf("first draw moves up: %q", first)
	}
	second := sc.draw([]string{"c", "d"})
	if !strings.HasPrefix(second, "\x1b[2A") || strings.Count(second, "\x1b[2K") != 2 {
		t.Errorf("second draw does not go back over the two lines it replaces: %q", second)
	}
}

func TestLogTailKeepsTheLastLines(t *testing.T) {
	lt := newLogTail(2)
	for _, l := range []string{"one\n", "two\n", "three\nfour\n"} {
		if _, err := lt.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if got := lt.String(); got != "three\nfour" {
		t.Fatalf("tail = %q", got)
	}
}
