package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
)

// MarkerConfig configures a Marker.
type MarkerConfig struct {
	// Interval is the longest a delivered row waits to be marked. If zero, 50ms.
	Interval time.Duration
	// Batch flushes early once this many rows wait, and is the most rows one UPDATE marks. If
	// zero, 1000.
	Batch int
	// Max bounds the rows waiting while the database is unreachable; beyond it marks are
	// dropped (the rows stay 'pending', which is only cosmetic). If zero, 1,000,000.
	Max int
	// Timeout bounds each statement, so a frozen pool connection (a partition) fails it instead
	// of hanging the marker, or the publisher in Delivered. If zero, 10s.
	Timeout time.Duration
	// RetryMax caps the wait after a failed flush, which starts at 500ms and doubles while
	// flushes keep failing. If zero, 30s.
	RetryMax time.Duration
	Logger   zerolog.Logger
	// Schema is the PostgreSQL schema of outbox_events. Empty: the unqualified name, which the
	// pool's search_path resolves.
	Schema string
	// Registerer receives the marker's series (outbox_relay_status_marks_pending and
	// _status_mark_errors_total). If nil, they are registered nowhere.
	Registerer prometheus.Registerer
}

var _ store.Marks = (*Marker)(nil)

// Marker marks delivered rows status='done' with processed_at and retries, in batches on its
// own pool, off the delivery path. It is advisory: the slot's position is the truth, and a mark
// lost in a crash leaves only a stale 'pending'.
type Marker struct {
	cfg     MarkerConfig
	pool    *pgxpool.Pool
	mu      sync.Mutex
	pending map[int]*markList // retries → rows
	late    []markBatch       // batches that found rows not yet visible
	// flushing is set while a flush writes.
	flushing bool
	n        int
	kick     chan struct{}
	m        *markerMetrics

	// Owned by Run's goroutine: when each distinct error was last logged.
	logged map[string]errLog
}

// errLog is when an error was last logged, and how many times it recurred since.
type errLog struct {
	at         time.Time
	suppressed int
}

// failureLogEvery is how often one distinct marking error is logged while it persists.
const failureLogEvery = time.Minute

// NewMarker returns a Marker writing through pool.
func NewMarker(pool *pgxpool.Pool, cfg MarkerConfig) *Marker {
	if cfg.Interval <= 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.Max <= 0 {
		cfg.Max = 1_000_000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	return &Marker{cfg: cfg, pool: pool, pending: map[int]*markList{}, kick: make(chan struct{}, 1),
		m: newMarkerMetrics(cfg.Registerer), logged: map[string]errLog{}}
}

// Done queues a delivered event's row to be marked, with its stream position (X-Event-Sequence),
// which `replay --since` re-sends it with. It never blocks on the database.
func (m *Marker) Done(id, seq string, retries int) {
	m.mu.Lock()
	if m.n >= m.cfg.Max {
		m.mu.Unlock()
		return
	}
	l := m.pending[retries]
	if l == nil {
		l = &markList{}
		m.pending[retries] = l
	}
	l.ids, l.seqs = append(l.ids, id), append(l.seqs, seq)
	m.n++
	full := m.n >= m.cfg.Batch
	m.mu.Unlock()
	if full {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// Flushed reports whether every mark queued so far is written (or given up): nothing waits, and
// no flush is under way.
func (m *Marker) Flushed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n == 0 && len(m.late) == 0 && !m.flushing
}

// Run flushes until ctx is done, then flushes once more with a short deadline. After a failed
// flush it waits (500ms, doubling up to RetryMax) before the next one: a database that refuses
// the marks is not asked again every Interval.
func (m *Marker) Run(ctx context.Context) error {
	flushLoop(ctx, m.cfg.Interval, m.cfg.RetryMax, m.kick, m.flush, func() {
		clear(m.logged)
		m.cfg.Logger.Info().Msg("marking delivered rows done works again")
	})
	return nil
}

// flush marks what waits, batches that found rows not yet visible included, and reports whether
// every batch it tried succeeded.
func (m *Marker) flush(ctx context.Context) bool {
	m.mu.Lock()
	batch := m.pending
	n := m.n
	// Late batches are the previous flushes': one found late now waits for the next flush.
	late := m.late
	m.pending, m.n, m.late = map[int]*markList{}, 0, nil
	idle := n == 0 && len(late) == 0
	m.flushing = !idle
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.flushing = false
		m.mu.Unlock()
	}()
	m.m.MarkerPending.Set(float64(n))
	if idle {
		return true
	}
	ok := true
	for retries, l := range batch {
		// At most Batch rows per UPDATE: the join finds few ids through the primary key, but tens
		// of thousands (marks that fell behind, as under a replay --since on a large table) are
		// planned as a scan of the whole table, which makes the marks fall further behind.
		for lo := 0; lo < len(l.ids); lo += m.cfg.Batch {
			hi := min(lo+m.cfg.Batch, len(l.ids))
			part := markList{ids: l.ids[lo:hi], seqs: l.seqs[lo:hi]}
			if !ok {
				m.requeue(retries, part) // a statement of this flush failed: the rest waits for the backoff too
				continue
			}
			ok = m.mark(ctx, markBatch{retries: retries, rows: part})
		}
	}
	for _, b := range late {
		b.tries++
		ok = m.mark(ctx, b) && ok
	}
	return ok
}

// mark updates one batch. A batch that updates fewer rows than it names is tried again at the
// next flushes, up to lateTries times: a row handed over by logical decoding can still be
// invisible to other sessions for a moment after its commit is flushed.
func (m *Marker) mark(ctx context.Context, b markBatch) bool {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	n, err := state.MarkDone(ctx, m.pool, m.cfg.Schema, b.rows.ids, b.retries, b.rows.seqs)
	if err != nil {
		m.m.MarkerErrors.Inc()
		m.logFailure(err, len(b.rows.ids))
		m.requeue(b.retries, b.rows)
		return false
	}
	if b.tries < lateTries && n < int64(len(b.rows.ids)) {
		m.mu.Lock()
		m.late = append(m.late, b)
		m.mu.Unlock()
	}
	return true
}

// logFailure logs a failed batch once per distinct error (by SQLSTATE, or by text) per
// failureLogEvery, with the number of failures left unlogged since; the metric counts each.
func (m *Marker) logFailure(err error, rows int) {
	key := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		key = pgErr.Code
	}
	now := time.Now()
	last, seen := m.logged[key]
	if seen && now.Sub(last.at) < failureLogEvery {
		last.suppressed++
		m.logged[key] = last
		return
	}
	m.logged[key] = errLog{at: now}
	e := m.cfg.Logger.Warn().Err(err).Int("rows", rows).Int("repeats_unlogged", last.suppressed).
		Dur("next_log_within", failureLogEvery)
	if pgErr != nil && pgErr.Code == pgerrcode.InsufficientPrivilege {
		e = e.Str("fix", "GRANT UPDATE ON outbox_events TO the relay's role")
	}
	e.Msg("marking delivered rows done failed; retrying with backoff (delivery continues; marks are advisory)")
}

// markList is rows to mark: ids and their stream positions, index for index.
type markList struct {
	ids, seqs []string
}

type markBatch struct {
	retries int
	rows    markList
	tries   int // flushes that found rows not yet visible
}

// lateTries is how many more flushes a batch that found rows not yet visible is tried at: about
// a second at the default Interval, enough for a commit to become visible on a loaded machine.
// A mark is also what `replay --since` selects delivered rows by.
const lateTries = 20

func (m *Marker) requeue(retries int, rows markList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n+len(rows.ids) > m.cfg.Max {
		return
	}
	l := m.pending[retries]
	if l == nil {
		l = &markList{}
		m.pending[retries] = l
	}
	l.ids, l.seqs = append(l.ids, rows.ids...), append(l.seqs, rows.seqs...)
	m.n += len(rows.ids)
}

// Delivered returns which of ids are marked done, for Resume. It gives up after the Timeout
// (Resume then delivers the events again), so an unreachable database cannot hold delivery.
func (m *Marker) Delivered(ctx context.Context, ids []string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	// A replay request resent with its transaction is no row: its empty id would fail the
	// uuid[] cast, and with it the whole check.
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	return state.MarkedDone(ctx, m.pool, m.cfg.Schema, ids)
}

// markerMetrics are the series a Marker writes; it is their only writer.
type markerMetrics struct {
	MarkerPending prometheus.Gauge
	MarkerErrors  prometheus.Counter
}

func newMarkerMetrics(reg prometheus.Registerer) *markerMetrics {
	return &markerMetrics{
		MarkerPending: metrics.Gauge(reg, "status_marks_pending", "Delivered events whose row is not yet marked done."),
		MarkerErrors: metrics.Counter(reg, "status_mark_errors_total",
			"Failed batches of status marks (retried; advisory only)."),
	}
}
