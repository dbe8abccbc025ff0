package pgstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
)

// DeliveryLogConfig configures a DeliveryLog.
type DeliveryLogConfig struct {
	// Interval is the longest an entry waits to be written. Zero: 1s.
	Interval time.Duration
	// Batch flushes early once this many failed attempts wait. Zero: 1000. Deliveries wait for
	// the Interval (or Max/2 entries): a row of outbox_deliveries holds one flush's deliveries
	// to one endpoint, so flushing them early would make more, smaller rows (measured: at 1,000
	// endpoints a flush per 1,000 entries wrote 906 rows per 1k deliveries, 0.9 entries a row).
	Batch int
	// Max bounds the entries waiting while the database is unreachable; beyond it entries are
	// dropped and counted (outbox_relay_delivery_log_dropped_total). Zero: 100,000.
	Max int
	// Timeout bounds each statement. Zero: 10s.
	Timeout time.Duration
	Logger  zerolog.Logger
	// Schema is the PostgreSQL schema of the delivery-log tables. Empty: the pool's search_path.
	Schema string
	// Registerer receives outbox_relay_delivery_log_pending and _dropped_total. Nil: nowhere.
	Registerer prometheus.Registerer
}

// DeliveryLog is the store.DeliveryLog kept in PostgreSQL: failed attempts one row each in
// outbox_delivery_attempts, successes one row per flush per endpoint in outbox_deliveries. It
// writes in batches from Run's goroutine, off the delivery path; like the done-marks it is
// advisory, and an entry lost to a crash or an unreachable database is only a gap in the log.
type DeliveryLog struct {
	cfg  DeliveryLogConfig
	pool *pgxpool.Pool
	kick chan struct{}

	mu                sync.Mutex
	failed, delivered state.DeliveryEntries
	flushing          bool

	pending prometheus.Gauge
	dropped prometheus.Counter
	logged  time.Time // when a failed flush was last logged (Run's goroutine only)
}

var (
	_ store.DeliveryLog     = (*DeliveryLog)(nil)
	_ store.DeliveryHistory = (*DeliveryLog)(nil)
)

// NewDeliveryLog returns a DeliveryLog writing through pool. Nothing is written
// until Run runs.
func NewDeliveryLog(pool *pgxpool.Pool, cfg DeliveryLogConfig) *DeliveryLog {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.Max <= 0 {
		cfg.Max = 100_000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	w := &DeliveryLog{cfg: cfg, pool: pool, kick: make(chan struct{}, 1),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_relay_delivery_log_pending",
			Help: "Delivery-log entries (failed attempts and deliveries to endpoints) waiting to be written."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_relay_delivery_log_dropped_total",
			Help: "Delivery-log entries dropped because too many waited (the database was unreachable or slow)."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(w.pending, w.dropped)
	}
	return w
}

// Failed queues a failed attempt. It never blocks.
func (w *DeliveryLog) Failed(a store.DeliveryAttempt) { w.add(&w.failed, a) }

// Delivered queues a delivery. It never blocks.
func (w *DeliveryLog) Delivered(a store.DeliveryAttempt) { w.add(&w.delivered, a) }

func (w *DeliveryLog) add(e *state.DeliveryEntries, a store.DeliveryAttempt) {
	w.mu.Lock()
	n := w.failed.Len() + w.delivered.Len()
	if n >= w.cfg.Max {
		w.mu.Unlock()
		w.dropped.Inc()
		return
	}
	e.Add(a.Pipeline, a.Endpoint, a.EventID, a.Attempt, a.At, a.Status, a.Latency, a.Error)
	kick := (e == &w.failed && e.Len() == w.cfg.Batch) || n+1 == w.cfg.Max/2
	w.mu.Unlock()
	if kick {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// Flushed reports whether every entry queued so far is written (or dropped).
func (w *DeliveryLog) Flushed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed.Len()+w.delivered.Len() == 0 && !w.flushing
}

// Run writes until ctx is done, then once more with a short deadline. After a failed write it
// waits (500ms doubling up to 30s) before the next: the entries wait, up to Max.
func (w *DeliveryLog) Run(ctx context.Context) error {
	flushLoop(ctx, w.cfg.Interval, 30*time.Second, w.kick, w.flush, func() {
		w.cfg.Logger.Info().Msg("writing the delivery log works again")
	})
	return nil
}

// flush writes what waits, and reports whether it could; what it could not write waits again.
func (w *DeliveryLog) flush(ctx context.Context) bool {
	w.mu.Lock()
	failed, delivered := w.failed, w.delivered
	w.failed, w.delivered = state.DeliveryEntries{}, state.DeliveryEntries{}
	w.flushing = failed.Len()+delivered.Len() > 0
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.flushing = false
		w.pending.Set(float64(w.failed.Len() + w.delivered.Len()))
		w.mu.Unlock()
	}()
	ok := true
	for _, b := range []struct {
		e     *state.DeliveryEntries
		into  *state.DeliveryEntries
		write func(context.Context, state.Batcher, string, *state.DeliveryEntries) error
	}{{&failed, &w.failed, insertAttempts}, {&delivered, &w.delivered, state.InsertDeliveries}} {
		if b.e.Len() == 0 {
			continue
		}
		if ok {
			sctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
			err := b.write(sctx, w.pool, w.cfg.Schema, b.e)
			cancel()
			if err == nil {
				continue
			}
			ok = false
			if time.Since(w.logged) >= failureLogEvery {
				w.logged = time.Now()
				w.cfg.Logger.Warn().Err(err).Int("entries", b.e.Len()).
					Msg("writing the delivery log failed; retrying with backoff (delivery continues; entries beyond the cap are dropped)")
			}
		}
		w.requeue(b.into, b.e)
	}
	return ok
}

// requeue puts entries that could not be written back in front of those queued meanwhile, as
// many as Max leaves room for; the rest are dropped and counted.
func (w *DeliveryLog) requeue(into, e *state.DeliveryEntries) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := w.cfg.Max - w.failed.Len() - w.delivered.Len()
	keep := min(max(room, 0), e.Len())
	w.dropped.Add(float64(e.Len() - keep))
	later := *into
	*into = state.DeliveryEntries{}
	for i := range keep {
		appendEntry(into, e, i)
	}
	for i := range later.Len() {
		appendEntry(into, &later, i)
	}
}

// DeliveredTo implements store.DeliveryHistory: which endpoints of pipeline the log records
// each of ids delivered to. Deliveries still queued here (written every Interval) are not
// seen; it gives up after the Timeout.
func (w *DeliveryLog) DeliveredTo(ctx context.Context, pipeline string, ids []string, endpoints ...string) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	if len(ids) == 0 {
		return map[string][]string{}, nil
	}
	// The planner prices a scan of the table by its heap alone, where the arrays are not (they
	// are TOASTed): it takes a scan that reads every array over the GIN index that reads none.
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off`); err != nil {
		return nil, err
	}
	return state.DeliveredTo(ctx, tx, w.cfg.Schema, pipeline, ids, endpoints)
}

func insertAttempts(ctx context.Context, db state.Batcher, s string, e *state.DeliveryEntries) error {
	return state.InsertDeliveryAttempts(ctx, db, s, e)
}

func appendEntry(into, from *state.DeliveryEntries, i int) {
	into.Pipelines, into.Endpoints = append(into.Pipelines, from.Pipelines[i]), append(into.Endpoints, from.Endpoints[i])
	into.EventIDs, into.Attempts = append(into.EventIDs, from.EventIDs[i]), append(into.Attempts, from.Attempts[i])
	into.At, into.Status = append(into.At, from.At[i]), append(into.Status, from.Status[i])
	into.LatencyMS, into.Errors = append(into.LatencyMS, from.LatencyMS[i]), append(into.Errors, from.Errors[i])
}
