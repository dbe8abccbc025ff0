// Package store is what the delivery engine (package publisher) keeps durable, as small
// interfaces: the status marks (Marks), a pipeline's dead letters, parked aggregates, backfill
// and replays since a time (Pipeline), the endpoints' backlogs off the WAL (Backlog), the
// endpoint versions and status (Endpoints), and the delivery log (DeliveryLog, read back by
// DeliveryHistory).
//
// # Implementations
//
// store/pgstore keeps them in PostgreSQL, on the relay's tables (through internal/state);
// store/memstore keeps them in memory, for the engine's tests and its deterministic simulation.
// store/storetest is one conformance suite that both pass: the same cases, the same answers, so
// that what the simulation proves of the engine on the in-memory stores holds on PostgreSQL.
//
// # What the engine relies on
//
// A write that returned nil is durable: the engine acknowledges an event it will not deliver
// now (a dead letter, a parked event, a backlog entry) only after the write that keeps it has
// succeeded. Writes are idempotent where the engine may repeat them after a restart (a backlog
// entry of a position written already, an endpoint version recorded already, a park of an event
// parked already). The marks and the delivery log are advisory: losing some to a crash leaves a
// row 'pending' or a gap in the log, never a lost event.
package store

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// ErrNotVisible is what a store's write returns (wrapped) when it names outbox rows it cannot
// see yet: logical decoding can hand over a transaction a moment before its commit is visible to
// other sessions (the WAL is flushed before the commit is published). The engine tries again.
var ErrNotVisible = errors.New("outbox rows not visible yet")

// Aggregate is an ordering key: an aggregate's type and id.
type Aggregate struct {
	Type string
	ID   string
}

// Marks records delivered rows with their stream position (Sequence): status 'done' in
// outbox_events for pgstore's Marker.
type Marks interface {
	// Done records that event id was delivered at stream position seq after retries failed
	// attempts. It must not block: it queues the mark and writes it later.
	Done(id, seq string, retries int)
	// Flushed reports whether every mark queued so far is written (or given up).
	Flushed() bool
	// Delivered returns which of ids are marked delivered (ids may hold ""; it is never
	// delivered).
	Delivered(ctx context.Context, ids []string) (map[string]bool, error)
}

// DeadLetters keeps a pipeline's (or an endpoint lane's) dead letters and parked aggregates:
// the engine writes through it before acknowledging an event it will not deliver now, so the
// slot can move past the event while the store keeps everything a replay needs.
type DeadLetters interface {
	// Parked returns the parked aggregates, loaded at start.
	Parked(ctx context.Context) ([]Aggregate, error)
	// DeadLetter records m failed with its attempts and last error, and parks its aggregate.
	DeadLetter(ctx context.Context, m *envelope.Message, attempts int, lastErr string) error
	// Park records events held behind a dead letter; parking one parked already changes nothing.
	Park(ctx context.Context, ms []*envelope.Message) error
	// Replayable returns the failed and parked events of an aggregate in commit order (their
	// recorded Sequence), to be re-sent: each keeps its recorded Sequence, or, if none was
	// recorded, takes one at the replay request's commit LSN at.
	Replayable(ctx context.Context, agg Aggregate, at pglogrepl.LSN) ([]*envelope.Message, error)
	// Unpark forgets a parked aggregate (and its failed and parked events) once its replay is
	// delivered.
	Unpark(ctx context.Context, agg Aggregate) error
	// Abandoned records an event given up on (a shadow pipeline's last attempt, an endpoint
	// disabled or removed with the event queued): it is settled, never parked.
	Abandoned(ctx context.Context, m *envelope.Message, attempts int, lastErr string) error
}

// Backfill keeps a new slot's backfill: the rows still pending when the slot was created, which
// the slot cannot carry.
type Backfill interface {
	// BackfillPage returns up to limit still-pending backfill events of slot after position
	// after, in order, and the last position read. Each event's Sequence is at the backfill's
	// commit LSN at (0), its index its backfill position.
	BackfillPage(ctx context.Context, slot string, after int64, limit int, at pglogrepl.LSN) ([]*envelope.Message, int64, error)
	// BackfillDone forgets slot's backfill.
	BackfillDone(ctx context.Context, slot string) error
}

// Replays reads and records replay --since requests.
type Replays interface {
	// SinceState reads request id.
	SinceState(ctx context.Context, id int64) (SinceState, error)
	// SincePage returns up to limit rows after st.After, in replay order, and the position of the
	// last. Each keeps its recorded Sequence, or, if none was recorded, takes one at the
	// request's commit LSN at that rises with insertion order.
	SincePage(ctx context.Context, st SinceState, limit int, at pglogrepl.LSN) ([]*envelope.Message, SinceCursor, error)
	// SinceProgress records that every row up to st.After was delivered (Sent of them), and
	// whether the request is complete. A request recorded complete is left as it is (no
	// error): a relay cut off from the slot may record stale progress after another relay
	// completed it.
	SinceProgress(ctx context.Context, st SinceState) error
}

// Pipeline is everything one pipeline (or one endpoint's lane, named "<pipeline>/<endpoint>")
// keeps: its dead letters and parked aggregates, its backfill and its replays since a time.
type Pipeline interface {
	DeadLetters
	Backfill
	Replays
}

// SinceState is a replay --since request as recorded: what it selects (the rows created in
// [Since, Until) that were delivered, dead-lettered or parked, of one aggregate type and event
// type when those are set) and how far it got.
type SinceState struct {
	ID            int64
	Pipeline      string
	Since, Until  time.Time // Until zero: no end
	AggregateType string
	EventType     string
	EventID       string // not empty: that event only (the API's resend of one event)
	Total, Sent   int64
	After         SinceCursor
	Done          bool
}

// SinceCursor is a position in the order a replay --since re-sends rows: the original stream
// position (X-Event-Sequence; empty for rows delivered before the relay recorded it), then
// insertion order, then id. Per aggregate this is commit order.
type SinceCursor struct {
	Sequence string
	Insert   int64
	ID       string // empty: before the first row
}

// Backlog keeps the endpoints' backlogs off the WAL, for one pipeline.
type Backlog interface {
	// Spill records entries of endpoint's backlog; an entry of a position recorded already is
	// kept as it is.
	Spill(ctx context.Context, endpoint string, es []BacklogEntry) error
	// Page returns up to limit entries of endpoint's backlog after position after and up to
	// position through, in order, with their events; an event's Sequence is the one recorded
	// when it was delivered, dead-lettered or parked ("" when none was).
	Page(ctx context.Context, endpoint string, after, through BacklogPos, limit int) ([]BacklogEvent, error)
	// Trim forgets endpoint's entries up to position upTo, and returns how many it forgot.
	Trim(ctx context.Context, endpoint string, upTo BacklogPos) (int64, error)
	// Drop forgets endpoint's whole backlog (it was removed) and returns the entries it forgot,
	// in order, for their rows to be settled: none is delivered to endpoint any more, so a row
	// whose entry has Mark is owed by no endpoint now, and one without is once the slot
	// confirmed past it.
	Drop(ctx context.Context, endpoint string) ([]BacklogEntry, error)
	// Sizes returns the backlog of each endpoint that has one.
	Sizes(ctx context.Context) (map[string]BacklogSize, error)
	// Oldest returns, for each of endpoints whose backlog holds an entry whose event is still in
	// the outbox, when the first such entry's event was created (outbox_events.created_at): the
	// age an endpoint owes its backlog from. It reads one entry per endpoint (the engine asks
	// at each status save, for the endpoints with a backlog only).
	Oldest(ctx context.Context, endpoints []string) (map[string]time.Time, error)
}

// ReplayBacklog is a Backlog that also takes the rows of a replay --since (pgstore's and
// memstore's do): the replay then goes through the endpoint's backlog while the other endpoints
// take the stream. With a Backlog that does not, a replay --since holds the pipeline's stream
// until it is delivered.
type ReplayBacklog interface {
	Backlog
	// SpillReplay records entries a replay --since selected for endpoint, as Spill does, and the
	// request's progress st, as Replays.SinceProgress does, in one transaction: a relay that
	// stops in between finds both or neither, and goes on from the progress with the same
	// positions.
	SpillReplay(ctx context.Context, endpoint string, es []BacklogEntry, st SinceState) error
}

// BacklogPos is an event's stream position: its commit LSN and its index in the transaction.
// An entry a replay --since wrote has a negative index (ReplayIdx): it stands at the request's
// commit, before that transaction's own events.
type BacklogPos struct {
	LSN pglogrepl.LSN
	Idx int
}

// ReplayIdx is the index of the n-th row (from 0) a replay --since writes into a backlog at its
// request's commit LSN: below every event's index, rising with the replay's order.
func ReplayIdx(n int64) int { return math.MinInt32 + int(n) }

// Replayed reports whether the entry at p was written by a replay --since (ReplayIdx).
func (p BacklogPos) Replayed() bool { return p.Idx < 0 }

// Less reports whether a comes before b.
func (a BacklogPos) Less(b BacklogPos) bool { return a.LSN < b.LSN || a.LSN == b.LSN && a.Idx < b.Idx }

// BacklogEntry is an event in an endpoint's backlog: its position, its id, the attempts made
// before it was spilled, and whether its delivery marks its row done (it was routed to this
// endpoint alone).
type BacklogEntry struct {
	Pos      BacklogPos
	EventID  string
	Attempts int
	Mark     bool
}

// BacklogEvent is an entry with its event; Message is nil when the row is gone from
// outbox_events.
type BacklogEvent struct {
	BacklogEntry
	Message *envelope.Message
}

// BacklogSize is how many entries an endpoint's backlog holds and the position of its last.
type BacklogSize struct {
	Entries int64
	Last    BacklogPos
}

// Endpoints keeps what the engine records about a pipeline's endpoints: the versions log (each
// endpoint's row as of the commit of each change, so that a relay that starts or takes over
// routes every transaction with the endpoints committed before it), their parked aggregates,
// and their status.
type Endpoints interface {
	// Versions returns the versions log in LSN order (then id), whether it was bootstrapped and
	// the LSN of that bootstrap (the versions there are the endpoints the log begins with).
	Versions(ctx context.Context) (marker pglogrepl.LSN, bootstrapped bool, vs []EndpointVersion, err error)
	// Bootstrap records every endpoint as it is now, at LSN 0, unless the log was bootstrapped.
	Bootstrap(ctx context.Context) error
	// Record adds a version (nil row: removed); a version recorded already is kept as it is.
	Record(ctx context.Context, v EndpointVersion) error
	// Prune forgets the versions no transaction after confirmed needs: per endpoint, every
	// version superseded by a later one at or below confirmed, and the newest at or below
	// confirmed when it is a removal and the endpoint's latest.
	Prune(ctx context.Context, confirmed pglogrepl.LSN) error
	// Parked returns every endpoint's parked aggregates, by endpoint id.
	Parked(ctx context.Context) (map[string][]Aggregate, error)
	// SaveStatus stores the status of endpoints; ForgetStatus drops a removed one's.
	SaveStatus(ctx context.Context, st []EndpointStatus) error
	ForgetStatus(ctx context.Context, id string) error
	// FailingSince returns when each failing endpoint's failures began, as its saved status
	// says.
	FailingSince(ctx context.Context) (map[string]time.Time, error)
}

// EndpointVersion is an endpoint's row (to_jsonb) as a change committed at LSN left it; a nil
// Row is a removal.
type EndpointVersion struct {
	ID  string
	LSN pglogrepl.LSN
	Row []byte
}

// EndpointStatus is what `outbox-relay status --endpoints` shows of an endpoint in a pipeline.
// A zero time is unknown. The ID "" is the pipeline's heartbeat, written at every save.
type EndpointStatus struct {
	ID                string
	Undelivered       int64
	OldestUndelivered time.Time
	LastSuccess       time.Time
	LastError         string
	LastErrorAt       time.Time
	FailuresInRow     int
	// FailingSince is when its current run of failed attempts began; zero: not failing.
	FailingSince time.Time
	// Backlog is how many events the endpoint's backlog off the WAL holds (not saved: `status
	// --endpoints` counts the table).
	Backlog int64
}

// DeliveryLog records delivery attempts, per endpoint. Its methods are called on the delivery
// path, so they must never block: they queue the entry and record it later.
type DeliveryLog interface {
	// Failed records a failed attempt.
	Failed(a DeliveryAttempt)
	// Delivered records a successful one.
	Delivered(a DeliveryAttempt)
}

// DeliveryHistory reads the delivery log back: which endpoints have an event. A relay that
// starts or takes over asks it about the events the stream sends again (the slot could not
// confirm past them while one endpoint owed them, though the others had them) and about the
// entries of a backlog it reads, so that an endpoint gets again only what the previous leader
// had not delivered to it, or delivered without the log recording it yet (the log is written
// in batches: pgstore.DeliveryLog's Interval).
type DeliveryHistory interface {
	// DeliveredTo returns, for those of ids that the log records delivered in pipeline, the
	// endpoints each was delivered to, sorted ("" is a pipeline's one destination); only
	// those of endpoints when any are given. ids may hold "" (never delivered); an id
	// delivered nowhere is absent.
	DeliveredTo(ctx context.Context, pipeline string, ids []string, endpoints ...string) (map[string][]string, error)
}

// DeliveryAttempt is one attempt to deliver one event to one endpoint. A batch attempt is one
// DeliveryAttempt per event.
type DeliveryAttempt struct {
	Pipeline, Endpoint, EventID string
	Attempt                     int // 1 for the first
	At                          time.Time
	Status                      int // the HTTP status; 0: none (a network error)
	Latency                     time.Duration
	// Error is why a failed attempt failed: Result.Reason and the first KB of the answer.
	Error string
}
