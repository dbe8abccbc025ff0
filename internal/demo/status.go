package demo

import (
	"fmt"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// sample is one look at the pipeline.
type sample struct {
	at           time.Time
	written      int64 // orders committed by the demo's producer
	delivered    int64 // events the warehouse pipeline delivered (answered 2xx)
	audited      int64 // big orders the filtered audit pipeline delivered
	bigWritten   int64 // big orders committed (total >= 400), what the audit pipeline should get
	retries      int64 // delivery attempts that failed and will be retried
	lagBytes     int64 // WAL the relay has not confirmed yet
	e2e          hist  // commit → delivered, from the relay's histogram
	duplicates   int64 // redeliveries the inbox absorbed
	lost         int64 // answers loseAcks replaced with a 502
	reservations int64 // stock reserved by the warehouse during this run
	failing      bool  // the consumer (NATS mode: the broker) is failing on purpose
	nats         bool  // NATS mode: delivered is PubAcks, lost is acks, failing is the broker
	outageLeft   time.Duration
	nextOutage   time.Duration
	partners     partnerCounts // what each partner endpoint received, and should have
}

// Series the status reads from the relay's registry.
const (
	seriesDelivered = "outbox_relay_events_delivered_total"
	seriesAttempts  = "outbox_relay_delivery_attempts_total"
	seriesLag       = "outbox_relay_replication_lag_bytes"
	seriesEndToEnd  = "outbox_relay_end_to_end_seconds"
)

// readRelay fills in what the relay's metrics say.
func (s *sample) readRelay(families []*dto.MetricFamily) {
	for _, f := range families {
		var ms []*dto.Metric // the warehouse pipeline's; the audit pipeline's delivered count aside
		for _, m := range f.GetMetric() {
			if hasLabel(m, "pipeline", pipelineAudit) {
				if f.GetName() == seriesDelivered {
					s.audited = int64(m.GetCounter().GetValue())
				}
				continue
			}
			if hasLabel(m, "pipeline", pipelinePartners) {
				continue // the partners' receivers count what they got
			}
			ms = append(ms, m)
		}
		if len(ms) == 0 {
			continue
		}
		switch f.GetName() {
		case seriesDelivered:
			s.delivered = int64(ms[0].GetCounter().GetValue())
		case seriesLag:
			s.lagBytes = int64(ms[0].GetGauge().GetValue())
		case seriesEndToEnd:
			s.e2e = histFrom(ms[0].GetHistogram())
		case seriesAttempts:
			s.retries = 0
			for _, m := range ms {
				if !hasLabel(m, "result", "success") {
					s.retries += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// window is the live view: the latest sample against one taken about a window ago.
type window struct {
	now, base sample
	elapsed   time.Duration
}

func (w window) rate() float64 {
	secs := w.now.at.Sub(w.base.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(w.now.written-w.base.written) / secs
}

func (w window) p99() string { return formatQuantile(w.now.e2e.since(w.base.e2e), 0.99) }

func (w window) p50() string { return formatQuantile(w.now.e2e.since(w.base.e2e), 0.5) }

func formatQuantile(h hist, q float64) string {
	d, ok := h.quantile(q)
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func (s sample) consumerState() string {
	switch {
	case s.failing && s.nats:
		return "down"
	case s.failing:
		return "failing"
	}
	return "ok"
}

// faulty is what fails on purpose: the consumer, or in NATS mode the broker.
func (s sample) faulty() string {
	if s.nats {
		return "broker"
	}
	return "consumer"
}

// line is the progress line printed when the output is not a terminal.
func (w window) line() string {
	s := w.now
	return fmt.Sprintf("demo: t=%s written=%d delivered=%d big_orders=%d duplicates_absorbed=%d reservations=%d retries=%d lag=%s p99=%s %s=%s partners: %s",
		w.elapsed.Round(time.Second), s.written, s.delivered, s.audited, s.duplicates, s.reservations, s.retries,
		formatBytes(s.lagBytes), w.p99(), s.faulty(), s.consumerState(), s.partners.line())
}

// block is the status screen redrawn in place on a terminal; note is the latest event. Its
// lines stay under 80 columns, or wrapping would break the redraw.
func (w window) block(note string) []string {
	s := w.now
	// The words that differ between the webhook consumer and NATS.
	delivered, lost, retries, acked := "signed POSTs answered 2xx", "answers lost", "failed attempts", "delivered"
	who, state := "consumer", fmt.Sprintf("ok, next outage in %s", s.nextOutage.Round(time.Second))
	if s.failing {
		state = fmt.Sprintf("FAILING on purpose (%s more): answers 500, the relay retries", s.outageLeft.Round(time.Second))
	}
	if s.nats {
		delivered, lost, retries, acked = "published to JetStream and acknowledged (PubAck)", "acks lost", "failed publishes", "PubAck"
		who, state = "broker", fmt.Sprintf("ok, next restart in %s", s.nextOutage.Round(time.Second))
		if s.failing {
			state = fmt.Sprintf("DOWN: nats-server killed (%s more), the relay retries", s.outageLeft.Round(time.Second))
		}
	}
	return []string{
		fmt.Sprintf("  elapsed       %s", w.elapsed.Round(time.Second)),
		fmt.Sprintf("  written       %-8d orders + outbox events, one transaction each (%.0f/s)", s.written, w.rate()),
		fmt.Sprintf("  delivered     %-8d %s", s.delivered, delivered),
		fmt.Sprintf("  big orders    %-8d via the filtered audit pipeline (total >= 400)", s.audited),
		fmt.Sprintf("  partners      %s", s.partners.short()),
		fmt.Sprintf("  reservations  %-8d stock reserved, once per order", s.reservations),
		fmt.Sprintf("  duplicates    %-8d redeliveries absorbed by the inbox (%d %s)", s.duplicates, s.lost, lost),
		fmt.Sprintf("  retries       %-8d %s, retried with backoff", s.retries, retries),
		fmt.Sprintf("  lag           %-8s of WAL not yet confirmed on the slot", formatBytes(s.lagBytes)),
		fmt.Sprintf("  latency       p99 %s, p50 %s, commit → %s, last %s", w.p99(), w.p50(), acked,
			w.now.at.Sub(w.base.at).Round(time.Second)),
		fmt.Sprintf("  %-13s %s", who, state),
		fmt.Sprintf("  last event    %s", note),
	}
}

// summary is the last line Run prints, over the whole run.
func summary(s sample, elapsed time.Duration) string {
	received, expected := s.partners.totals()
	return fmt.Sprintf("demo: written=%d delivered=%d big_orders=%d duplicates_absorbed=%d reservations=%d retries=%d p99=%s "+
		"partner_deliveries=%d partner_subscribed=%d elapsed=%s",
		s.written, s.delivered, s.audited, s.duplicates, s.reservations, s.retries, formatQuantile(s.e2e, 0.99),
		received, expected, elapsed.Round(time.Second))
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f, suffix := float64(n), ""
	for _, suffix = range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f%s", f, suffix)
}

// screen draws the status on a terminal: the block is redrawn in place, other lines scroll
// above it.
type screen struct {
	drawn int // lines of the block currently on screen
	b     strings.Builder
}

// draw returns the escapes and text that replace the block on screen with lines.
func (sc *screen) draw(lines []string) string {
	sc.b.Reset()
	if sc.drawn > 0 {
		fmt.Fprintf(&sc.b, "\x1b[%dA", sc.drawn)
	}
	for _, l := range lines {
		sc.b.WriteString("\r\x1b[2K")
		sc.b.WriteString(l)
		sc.b.WriteByte('\n')
	}
	sc.drawn = len(lines)
	return sc.b.String()
}

// release leaves the block where it is, so that what follows is printed below it.
func (sc *screen) release() string {
	sc.drawn = 0
	return "\r\x1b[2K"
}
