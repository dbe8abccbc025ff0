package publisher

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// MarkerConfig configures a Marker.
type MarkerConfig struct {
	// Interval is the longest a delivered row waits to be marked. If zero, 50ms.
	Interval time.Duration
	// Batch flushes early once this many rows wait. If zero, 1000.
	Batch int
	// Max bounds the rows waiting while the database is unreachable; beyond it marks are
	// dropped (the rows stay 'pending', which is only cosmetic). If zero, 1,000,000.
	Max int
	// Timeout bounds each statement, so a frozen pool connection (a partition) fails it instead
	// of hanging the marker, or the publisher in Delivered. If zero, 10s.
	Timeout time.Duration
	Logger  zerolog.Logger
	// Registerer receives the marker's series (outbox_relay_status_marks_pending and
	// _status_mark_errors_total). If nil, they are registered nowhere.
	Registerer prometheus.Registerer
}

// Marker marks delivered rows status='done' with processed_at and retries, in batches on its
// own pool, off the delivery path. It is advisory: the slot's position is the truth, and a mark
// lost in a crash leaves only a stale 'pending'.
type Marker struct {
	cfg     MarkerConfig
	pool    *pgxpool.Pool
	mu      sync.Mutex
	pending map[int][]string // retries → ids
	late    []markBatch      // batches that found rows not yet visible
	n       int
	kick    chan struct{}
	m       *markerMetrics
}

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
	return &Marker{cfg: cfg, pool: pool, pending: map[int][]string{}, kick: make(chan struct{}, 1),
		m: newMarkerMetrics(cfg.Registerer)}
}

// Done queues a delivered event's row to be marked. It never blocks on the database.
func (m *Marker) Done(id string, retries int) {
	m.mu.Lock()
	if m.n >= m.cfg.Max {
		m.mu.Unlock()
		return
	}
	m.pending[retries] = append(m.pending[retries], id)
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

// Run flushes until ctx is done, then flushes once more with a short deadline.
func (m *Marker) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			m.flush(final)
			cancel()
			return nil
		case <-t.C:
		case <-m.kick:
		}
		m.flush(ctx)
	}
}

const markSQL = `UPDATE outbox_events SET status = 'done', processed_at = now(), retries = $2 WHERE id = ANY($1::uuid[])`

func (m *Marker) flush(ctx context.Context) {
	m.mu.Lock()
	batch := m.pending
	n := m.n
	m.pending, m.n = map[int][]string{}, 0
	m.mu.Unlock()
	m.m.MarkerPending.Set(float64(n))
	if n == 0 {
		return
	}
	for retries, ids := range batch {
		m.mark(ctx, retries, ids, true)
	}
	m.mu.Lock()
	late := m.late
	m.late = nil
	m.mu.Unlock()
	for _, b := range late {
		m.mark(ctx, b.retries, b.ids, false)
	}
}

// mark updates one batch. A batch that updates fewer rows than it names is tried once more at
// the next flush: a row handed over by logical decoding can still be invisible to other
// sessions for a moment after its commit is flushed.
func (m *Marker) mark(ctx context.Context, retries int, ids []string, again bool) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	tag, err := m.pool.Exec(ctx, markSQL, ids, retries)
	if err != nil {
		m.m.MarkerErrors.Inc()
		m.cfg.Logger.Warn().Err(err).Int("rows", len(ids)).Msg("marking delivered rows done failed; will retry")
		m.requeue(retries, ids)
		return
	}
	if again && tag.RowsAffected() < int64(len(ids)) {
		m.mu.Lock()
		m.late = append(m.late, markBatch{retries, ids})
		m.mu.Unlock()
	}
}

type markBatch struct {
	retries int
	ids     []string
}

func (m *Marker) requeue(retries int, ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n+len(ids) > m.cfg.Max {
		return
	}
	m.pending[retries] = append(m.pending[retries], ids...)
	m.n += len(ids)
}

// Delivered returns which of ids are marked done, for Resume. It gives up after the Timeout
// (Resume then delivers the events again), so an unreachable database cannot hold delivery.
func (m *Marker) Delivered(ctx context.Context, ids []string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	rows, err := m.pool.Query(ctx, `SELECT id::text FROM outbox_events WHERE id = ANY($1::uuid[]) AND status = 'done'`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		seen[id] = true
	}
	return seen, rows.Err()
}
