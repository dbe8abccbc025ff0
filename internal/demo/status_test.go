package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/destination"
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

// readRelay must read the relay's real series, under their real names and types.
func TestReadRelayFromTheRelaysRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	relay.RegisterMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]dto.MetricType{}
	for _, f := range families {
		types[f.GetName()] = f.GetType()
	}
	for name, want := range map[string]dto.MetricType{seriesDelivered: dto.MetricType_COUNTER,
		seriesAttempts: dto.MetricType_COUNTER, seriesLag: dto.MetricType_GAUGE, seriesEndToEnd: dto.MetricType_HISTOGRAM} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("%s: %d series, %v: the relay does not export it", name, n, err)
		}
		if types[name] != want {
			t.Errorf("%s is a %v in the relay, readRelay reads a %v", name, types[name], want)
		}
	}

	// The same series written, one pipeline's apart from the audit pipeline's and the partners'
	// (whose failed attempts are not the warehouse's retries).
	vals := prometheus.NewRegistry()
	own := prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": "default"}, vals)
	audit := prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipelineAudit}, vals)
	delivered := prometheus.NewCounter(prometheus.CounterOpts{Name: seriesDelivered, Help: "h"})
	audited := prometheus.NewCounter(prometheus.CounterOpts{Name: seriesDelivered, Help: "h"})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesAttempts, Help: "h"}, []string{"result"})
	lag := prometheus.NewGauge(prometheus.GaugeOpts{Name: seriesLag, Help: "h"})
	endToEnd := prometheus.NewHistogram(prometheus.HistogramOpts{Name: seriesEndToEnd, Help: "h",
		Buckets: []float64{0.001, 0.002, 0.004, 0.008}})
	own.MustRegister(delivered, attempts, lag, endToEnd)
	audit.MustRegister(audited)
	partnerAttempts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: seriesAttempts, Help: "h"}, []string{"result"})
	prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipelinePartners}, vals).MustRegister(partnerAttempts)
	partnerAttempts.WithLabelValues(destination.Result5xx).Add(50)
	delivered.Add(7)
	audited.Add(2)
	attempts.WithLabelValues(destination.ResultSuccess).Add(7)
	attempts.WithLabelValues(destination.Result5xx).Add(3)
	attempts.WithLabelValues(destination.ResultTimeout).Add(1)
	lag.Set(2048)
	for i := 0; i < 100; i++ {
		endToEnd.Observe(0.003)
	}
	if got := testutil.ToFloat64(delivered); got != 7 {
		t.Fatalf("delivered counter reads %v, want 7", got)
	}
	families, err = vals.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s sample
	s.readRelay(families)
	if s.delivered != 7 || s.audited != 2 || s.retries != 4 || s.lagBytes != 2048 {
		t.Fatalf("delivered=%d audited=%d retries=%d lag=%d, want 7, 2, 4, 2048", s.delivered, s.audited, s.retries, s.lagBytes)
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
	// Hours of orders: five-digit counts still fit.
	w.now.partners = partnerCounts{ids: []string{"acme", "globex", "ledger", "initech"},
		received: []int64{12345, 23456, 98765, 0}, expected: []int64{12345, 23456, 98770, 0}}
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
		if want := "  partners      acme 12345  globex 23456  ledger 98765  initech 0  (5 due)"; !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("status lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	line := w.line()
	for _, want := range []string{"written=500", "delivered=480", "duplicates_absorbed=9", "reservations=480", "retries=120", "lag=3.0MiB", "consumer=failing",
		"partners: acme=12345/12345 globex=23456/23456 ledger=98765/98770 initech=0/0"} {
		if !strings.Contains(line, want) {
			t.Errorf("progress line lacks %s: %s", want, line)
		}
	}
	got := summary(sample{written: 5, delivered: 5, reservations: 5}, 6*time.Second)
	if want := "demo: written=5 delivered=5 big_orders=0 duplicates_absorbed=0 reservations=5 retries=0 p99=n/a " +
		"partner_deliveries=0 partner_subscribed=0 elapsed=6s"; got != want {
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
