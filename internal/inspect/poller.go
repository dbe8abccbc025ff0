package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/schema"

	"github.com/outbox-relay/outbox-relay/internal/settings"
)

// DefaultPollInterval is the Poller's interval when none is given.
const DefaultPollInterval = settings.PollInterval

// maxPollTime bounds one poll, so a slow database cannot pile polls up.
const maxPollTime = 10 * time.Second

// Poller refreshes the gauges that only the database knows: SlotRetainedWAL, SlotActive and
// OutboxRows; it is their only writer. (outbox_relay_parked_aggregates is the publisher's: it
// knows the moment an aggregate is parked or unparked.)
type Poller struct {
	db       DB
	table    string // outbox_events, qualified
	slot     string
	m        *metrics.Metrics
	interval time.Duration
	log      zerolog.Logger
}

// NewPoller returns a Poller of slot's gauges and of the outbox_events of schema s (empty: as
// the search_path resolves it). db is usually the relay's *pgxpool.Pool; a zero interval means
// DefaultPollInterval; a nil m means metrics registered nowhere.
func NewPoller(db DB, s, slot string, m *metrics.Metrics, interval time.Duration, log zerolog.Logger) *Poller {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	if m == nil {
		m = metrics.Discard()
	}
	return &Poller{db: inSchema(db, s), table: schema.Qualify(s, schema.Events), slot: slot, m: m, interval: interval, log: log}
}

// Run polls at once and then every interval until ctx is done, and returns nil then. A failed
// poll is logged and leaves the gauges as they were; it never stops Run, so a database hiccup
// cannot stop the relay.
func (p *Poller) Run(ctx context.Context) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		if err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("polling slot and outbox gauges")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pollSQL reads everything in one round trip. Counting by status with GROUP BY would scan the
// whole table, most of which is 'done'; instead the non-done statuses are counted through the
// (status, available_at) index, which costs in proportion to the undelivered rows, and 'done'
// is the table's live-tuple statistic minus those counts (an estimate: the statistic is
// flushed by backends about once a second and reset by VACUUM and ANALYZE). Measured on 2M
// rows: about 2 ms, against 330 ms for the GROUP BY.
const pollSQL = `
SELECT coalesce((SELECT active FROM pg_replication_slots WHERE slot_name = $1), false),
       coalesce((SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots
                 WHERE slot_name = $1), 0)::float8,
       (SELECT count(*) FROM {outbox_events} WHERE status = 'pending'),
       (SELECT count(*) FROM {outbox_events} WHERE status = 'failed'),
       (SELECT count(*) FROM {outbox_events} WHERE status = 'parked'),
       pg_stat_get_live_tuples($2::regclass)`

// Poll reads the values once and sets the gauges. A missing or invalidated slot reads as
// inactive and retaining nothing.
func (p *Poller) Poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(p.interval, maxPollTime))
	defer cancel()
	var active bool
	var retained float64
	var pending, failed, parked, live int64
	err := p.db.QueryRow(ctx, pollSQL, p.slot, p.table).Scan(&active, &retained, &pending, &failed, &parked, &live)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	p.m.SlotActive.Set(boolFloat(active))
	p.m.SlotRetainedWAL.Set(retained)
	p.m.OutboxRows.WithLabelValues("pending").Set(float64(pending))
	p.m.OutboxRows.WithLabelValues("failed").Set(float64(failed))
	p.m.OutboxRows.WithLabelValues("parked").Set(float64(parked))
	p.m.OutboxRows.WithLabelValues("done").Set(float64(max(live-pending-failed-parked, 0)))
	return nil
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
