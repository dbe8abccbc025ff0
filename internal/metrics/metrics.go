// Package metrics holds what the packages that export Prometheus series share: the namespace,
// a registration that tolerates a second component on the same Registerer, and the relay's own
// per-pipeline gauges (the tracker's buffer and the polled database gauges). Each public
// package (cdc, publisher) defines its own series and registers them on the Registerer its
// Config names; nothing is ever registered on the global registry.
package metrics

import (
	"errors"
	"reflect"
	"regexp"
	"sync"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every series: outbox_relay_.
const Namespace = "outbox_relay"

// Register registers c on reg and returns it; if reg already holds an equal collector (a
// component started again with the same Registerer), it returns that one instead, so both
// write the same series. A nil reg registers nowhere. A collector that clashes with a different
// one of the same name is a programming error and panics, like MustRegister.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}

// Gauge returns a registered gauge outbox_relay_<name>.
func Gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}))
}

// Counter returns a registered counter outbox_relay_<name>.
func Counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	return Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}))
}

// Histogram returns a registered histogram outbox_relay_<name>.
func Histogram(reg prometheus.Registerer, name, help string, buckets []float64) prometheus.Histogram {
	return Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name,
		Help: help, Buckets: buckets}))
}

// Metrics holds the relay's own per-pipeline gauges: those refreshed from the tracker by the
// relay, and those polled from the database by inspect.Poller. Each has one writer.
type Metrics struct {
	OldestUndelivered prometheus.Gauge
	BufferedEvents    prometheus.Gauge
	BufferedBytes     prometheus.Gauge
	SlotRetainedWAL   prometheus.Gauge
	SlotActive        prometheus.Gauge
	OutboxRows        *prometheus.GaugeVec
	// PipelineUp is 1 while the pipeline streams or stands by for another instance, 0 while it
	// starts, retries its start-up or cannot connect to its slot.
	PipelineUp prometheus.Gauge
}

// New creates the series and registers them on reg (nil: nowhere).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		OldestUndelivered: Gauge(reg, "oldest_undelivered_seconds",
			"Age (from commit) of the oldest event received but not yet delivered; 0 when none waits."),
		BufferedEvents: Gauge(reg, "buffered_events", "Events received and not yet delivered."),
		BufferedBytes:  Gauge(reg, "buffered_bytes", "Approximate bytes of events received and not yet delivered."),
		SlotRetainedWAL: Gauge(reg, "slot_retained_wal_bytes",
			"WAL the server keeps for the slot (current WAL position minus restart_lsn), polled."),
		SlotActive: Gauge(reg, "slot_active", "1 when the slot is in use by some process (any instance), polled."),
		OutboxRows: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "outbox_rows",
			Help: "outbox_events rows by status (estimated cheaply), polled."}, []string{"status"})),
		PipelineUp: Gauge(reg, "pipeline_up", "1 while the pipeline streams from its slot or stands by for another "+
			"instance; 0 while it starts, retries its start-up (slot, publication, destination) or cannot connect "+
			"(e.g. max_wal_senders): /readyz and the log say why."),
	}
	// The children exist from the start, so every status is listed before the first poll (and
	// through a Registerer wrapped with a pipeline label, where the vector itself is hidden).
	for _, st := range []string{"pending", "failed", "parked", "done"} {
		m.OutboxRows.WithLabelValues(st)
	}
	return m
}

// Discard returns metrics registered nowhere, for components built without a registry.
func Discard() *Metrics { return New(nil) }

// Recorder is a Registerer that remembers every collector registered through it by the name
// of its first series, so that a test can write a component's series, or touch a vector so it
// is gathered. Use it only in tests.
type Recorder struct {
	prometheus.Registerer
	mu     sync.Mutex
	byName map[string]prometheus.Collector
}

// NewRecorder returns a Recorder registering on reg.
func NewRecorder(reg prometheus.Registerer) *Recorder {
	return &Recorder{Registerer: reg, byName: map[string]prometheus.Collector{}}
}

var fqName = regexp.MustCompile(`fqName: "([^"]*)"`)

// Register registers c and remembers it.
func (r *Recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	descs := make(chan *prometheus.Desc, 256)
	go func() { c.Describe(descs); close(descs) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			if _, seen := r.byName[m[1]]; !seen {
				r.byName[m[1]] = unwrap(c)
			}
		}
	}
	return nil
}

// unwrap returns the collector that prometheus.WrapRegistererWith wrapped (a pipeline's
// label), so that a test can write the component's own series; any other collector as it is.
// The wrapper's type is unexported, hence the reflection: this is test support only.
func unwrap(c prometheus.Collector) prometheus.Collector {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return c
	}
	f := v.Elem().FieldByName("wrappedCollector")
	if !f.IsValid() || f.Type() != reflect.TypeFor[prometheus.Collector]() {
		return c
	}
	inner, ok := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(prometheus.Collector)
	if !ok || inner == nil {
		return c
	}
	return unwrap(inner)
}

// MustRegister registers cs and remembers them; it panics on an error.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Collector returns the collector registered for the series name (outbox_relay_...), or nil.
func (r *Recorder) Collector(name string) prometheus.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

// Names returns the names of the collectors registered, in no order.
func (r *Recorder) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	return names
}
