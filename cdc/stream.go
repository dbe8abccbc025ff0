package cdc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/diagnose"
)

// Config configures a Stream.
type Config struct {
	// DSN is the connection string; replication=database is added to it.
	DSN         string
	Slot        string
	Publication string
	// Schema is the schema whose outbox_events the stream decodes; inserts into a table of that
	// name in another schema are ignored. If empty, the replication connection's
	// current_schema(), read at each connect.
	Schema string
	// StatusInterval is the longest gap between standby status updates. If zero, it is a third
	// of the server's wal_sender_timeout, at most 10s.
	StatusInterval time.Duration
	// ConfirmDelay is how soon after delivery progress the new position is confirmed. If zero,
	// 100ms.
	ConfirmDelay time.Duration
	// StandbyRetry is how often a standby instance retries a slot held by another. If zero, 2s.
	StandbyRetry time.Duration
	// ReplicationTimeout is how long the connection may stay silent while the stream waits
	// for the server: after a quarter of it the stream probes (a status update that requests a
	// reply, which a live walsender answers at once), and after all of it the connection is
	// dead, so it is closed and the stream reconnects. It also bounds connecting and each status
	// update write. If zero, the server's wal_sender_timeout, or DefaultReplicationTimeout when
	// that is 0 (disabled).
	ReplicationTimeout time.Duration
	// Dial opens the replication connection's socket. If nil, pgconn's default dialer (Go's
	// TCP keepalives, no TCP_USER_TIMEOUT).
	Dial pgconn.DialFunc
	// ReconnectMax caps the reconnect backoff, which starts at 100ms and returns there after a
	// session that streamed for a minute. If zero, 10s.
	ReconnectMax time.Duration
	Logger       zerolog.Logger
	// AllowStandby lets the stream decode on a server in recovery (a replication DSN that names a
	// standby). If false (the default), a connection that reaches a standby is closed and
	// retried, so a slot is only ever streamed on the primary (failover.go).
	AllowStandby bool
	// Move, from SetupResult.Move, is a move of the slot from another server under way: the
	// stream first streams the old slot up to the move's fence, then drops it and streams the
	// slot on DSN (move.go). Nil: the slot is on DSN.
	Move *Move
	// Registerer receives the stream's series (outbox_relay_streaming, _reconnects_total, ...;
	// see docs/reference/metrics.md). If nil, they are registered nowhere. Wrap it with
	// prometheus.WrapRegistererWith to label one stream's series among several.
	Registerer prometheus.Registerer
	// ExitOnConfigError ends Run with a reconnect that fails for a reason in the configuration:
	// the database or the role does not exist, the password is wrong, the role may not connect,
	// the host name does not resolve, TLS the server does not offer or a certificate it cannot
	// verify, or a connection refused for a minute. If false (the default) such a failure is
	// retried like an outage, and each attempt's log line names its cause and its fix.
	ExitOnConfigError bool
	// Tracer, if set, records the decode of every transaction handed on as a span, whose
	// traceparent each of its events carries as envelope.Message.DecodeSpan (trace.go). Nil:
	// nothing is traced, at the cost of one nil check per transaction.
	Tracer TxTracer
}

func (c *Config) defaults() {
	if c.ConfirmDelay <= 0 {
		c.ConfirmDelay = 100 * time.Millisecond
	}
	if c.StandbyRetry <= 0 {
		c.StandbyRetry = 2 * time.Second
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 10 * time.Second
	}
}

// Stream reads committed outbox transactions from the slot and confirms what its Tracker
// allows. Run it once; it owns its replication connection.
type Stream struct {
	cfg     Config
	tracker *Tracker
	log     zerolog.Logger
	m       *streamMetrics

	lastEnd   pglogrepl.LSN // highest transaction end received by this process
	standby   bool          // said "standing by" already
	sessions  uint64        // streaming sessions started
	since     time.Time     // the current session started streaming; zero if it has not
	streaming atomic.Bool
	current   atomic.Uint64 // the session that holds the slot now; 0 while none does
	from      atomic.Uint64 // the slot's confirmed position as the last session started
	pubLost   atomic.Bool   // see PublicationLost
	schema    string        // the schema decoded: Config.Schema, or the last session's current_schema()

	mu         sync.Mutex // guards waitErr and standingBy, which State reads
	waitErr    error
	standingBy bool
	move       *Move          // the move under way (Config.Move) until it is done; only Run's goroutine uses it
	watch      diagnose.Watch // tells a reconnect's configuration error from an outage; only Run's goroutine uses it
}

// Streaming reports whether the stream holds the slot and is connected.
func (s *Stream) Streaming() bool { return s.streaming.Load() }

// Session returns the number of the streaming session that holds the slot now (from 1, as
// Tx.Session of the transactions it hands over), or 0 while the stream does not hold it.
func (s *Stream) Session() uint64 { return s.current.Load() }

// SessionFrom returns the slot's confirmed position as the last session started (read just
// before it took the slot): what this process received before and the slot confirmed past,
// another process delivered (or settled) while it held the slot.
func (s *Stream) SessionFrom() pglogrepl.LSN { return pglogrepl.LSN(s.from.Load()) }

// State is what a Stream is doing.
type State struct {
	// Streaming: it holds the slot and is connected.
	Streaming bool
	// StandingBy: another process streams from the slot; this one retries and takes over when
	// it goes.
	StandingBy bool
	// Err is why the last session ended while the stream waits to connect again (a server limit
	// wraps ErrServerLimit); nil while it streams or stands by, and before its first session.
	Err error
}

// State reports what the stream is doing; it is safe to call from any goroutine.
func (s *Stream) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Streaming: s.streaming.Load(), StandingBy: s.standingBy, Err: s.waitErr}
}

// setWaiting records why the stream is not streaming: standing by, or err.
func (s *Stream) setWaiting(standingBy bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.standingBy, s.waitErr = standingBy, err
}

// errPublicationGone is what PublicationLost reports to undefinedObject.
var errPublicationGone = errors.New("the publication was dropped or replaced while the relay streamed")

// PublicationLost tells the stream that its publication was dropped, or dropped and created
// again, while it streamed (the caller watches the catalog). PostgreSQL 18's walsender no longer
// fails on a missing publication: it streams on without the rows, so without this the slot would
// move past them. The stream then ends as on the walsender's error of older versions: it drops
// the slot and returns an error wrapping ErrPublicationMissing, and a restart creates a new slot
// whose backfill delivers the rows still pending.
func (s *Stream) PublicationLost() { s.pubLost.Store(true) }

func (s *Stream) setStreaming(on bool) {
	s.streaming.Store(on)
	if !on {
		s.current.Store(0)
	}
	if on {
		s.m.Streaming.Set(1)
	} else {
		s.m.Streaming.Set(0)
		s.m.LagBytes.Set(0) // not ours to report while another instance (or nobody) streams
	}
}

// NewStream returns a Stream that registers transactions with tracker.
func NewStream(cfg Config, tracker *Tracker) *Stream {
	cfg.defaults()
	return &Stream{cfg: cfg, tracker: tracker, log: cfg.Logger, m: newStreamMetrics(cfg.Registerer), move: cfg.Move}
}

// Run streams until ctx is done or a permanent error occurs, sending each committed transaction
// to out after registering it with the tracker. Connection losses are retried with backoff; a
// slot held by another process is retried every StandbyRetry; a message that cannot be decoded
// ends the run with ErrDecode, since a retry would read it again.
//
// After ctx is done, Run stops reading but keeps the connection alive until drained is closed
// (the publisher has finished what it had in flight), then confirms the final position, ends
// replication cleanly and returns nil.
func (s *Stream) Run(ctx context.Context, out chan<- *Tx, drained <-chan struct{}) error {
	backoff := backoffMin
	for {
		err := s.session(ctx, out, drained)
		var streamed time.Duration
		if !s.since.IsZero() {
			streamed, s.since = time.Since(s.since), time.Time{}
		}
		s.setStreaming(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errFenceReached) {
			if err = s.retireOld(ctx); err == nil {
				continue // the new slot, at once
			}
		}
		wait, perr := s.classify(err, &backoff, streamed)
		if perr != nil {
			return perr
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// classify decides what follows a failed session: a wait before retrying, or a permanent error.
// streamed is how long the session streamed (see nextBackoff).
func (s *Stream) classify(err error, backoff *time.Duration, streamed time.Duration) (time.Duration, error) {
	if errors.Is(err, errPublicationGone) {
		// The session's connection is closed now, so the slot can be dropped (undefinedObject).
		if err = s.undefinedObject(err); errors.Is(err, ErrSlotMissing) {
			return 0, err
		}
	}
	config := s.watch.Config(err)
	p, diagnosed := diagnose.Connect(err)
	if diagnosed = diagnosed && p.Kind != diagnose.Outage; diagnosed {
		err = p // the state and the log say the cause and the fix, not every attempt pgconn made
	}
	s.setWaiting(false, err)
	switch {
	case diagnosed && config && s.cfg.ExitOnConfigError:
		s.log.Error().Str("cause", p.Cause).Str("fix", p.Fix).Str("database", p.Addr).Str("slot", s.cfg.Slot).
			Msg("cannot reconnect to the database: a configuration error; stopping")
		return 0, err
	case errors.Is(err, errSlotActive):
		s.setWaiting(true, nil)
		if !s.standby {
			s.log.Info().Str("slot", s.cfg.Slot).Dur("retry", s.cfg.StandbyRetry).
				Msg("slot is active in another process; standing by")
			s.standby = true
		}
		return s.cfg.StandbyRetry, nil
	case errors.Is(err, ErrDecode):
		s.log.Error().Err(err).Str("slot", s.cfg.Slot).Msg("replication stream cannot be decoded; stopping")
		return 0, err
	case errors.Is(err, ErrSlotInvalid), errors.Is(err, ErrSlotMissing), errors.Is(err, ErrNoPrivilege),
		errors.Is(err, ErrNoReplication), errors.Is(err, ErrBadDSN), errors.Is(err, ErrSchema), errors.Is(err, ErrMoveBroken):
		return 0, err
	}
	s.m.Reconnects.Inc()
	var wait time.Duration
	wait, *backoff = nextBackoff(*backoff, streamed, s.cfg.ReconnectMax)
	if errors.Is(err, ErrServerLimit) {
		s.log.Error().Err(err).Str("slot", s.cfg.Slot).Dur("retry_in", wait).Msg("cannot stream: a server limit is reached")
		return wait, nil
	}
	if diagnosed && p.Fix != "" {
		s.logDiagnosed(p, config, wait)
		return wait, nil
	}
	s.log.Warn().Err(err).Dur("retry_in", wait).Msg("replication connection lost; reconnecting")
	return wait, nil
}

// logDiagnosed logs a reconnect that failed for a diagnosed reason, with its cause and fix: an
// error when it is a configuration error, a warning while it may be an outage.
func (s *Stream) logDiagnosed(p *diagnose.Problem, config bool, wait time.Duration) {
	ev := s.log.Warn()
	if config {
		ev = s.log.Error()
	}
	ev.Str("cause", p.Cause).Str("fix", p.Fix).Str("database", p.Addr).Dur("retry_in", wait).
		Msg("cannot reconnect to the database; retrying")
}

// ErrDecode is wrapped when a message from the slot cannot be turned into events: the outbox
// table changed shape while the relay ran, or the bytes are not valid pgoutput. It is permanent:
// a reconnect re-reads the same WAL, decoded against the same historic table definition, and
// fails the same way, so Run returns it instead of retrying. Nothing from that transaction on
// was confirmed.
var ErrDecode = errors.New("replication stream cannot be decoded")

// decodeError says what failed to decode where, and what to do.
func (s *Stream) decodeError(at pglogrepl.LSN, err error) error {
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%w at %s: %w; this is a bug in the relay or the server: report it with this message "+
			"(slot %q has not confirmed this position, so nothing is lost while the relay is down)", ErrDecode, at, err, s.cfg.Slot)
	}
	return fmt.Errorf("%w at %s: %w; table %s was altered while the relay ran, and rows written in that shape "+
		"cannot be streamed: restore its columns (`outbox-relay status` names what is missing), then drop the slot "+
		"with SELECT pg_drop_replication_slot('%s') and start the relay again: the new slot is created with a backfill "+
		"of the pending rows from the table (rows delivered but not yet marked done are sent again)", ErrDecode, at, err, OutboxTable, s.cfg.Slot)
}

// session runs one replication connection from START_REPLICATION to its end. Connecting and
// starting are bounded by the replication timeout (or its default), so a partition during a
// reconnect cannot hang it.
func (s *Stream) session(ctx context.Context, out chan<- *Tx, drained <-chan struct{}) (err error) {
	startCtx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.ReplicationTimeout, DefaultReplicationTimeout))
	defer cancel()
	tgt, err := s.target(startCtx)
	if err != nil {
		return err
	}
	conn, err := connectReplication(startCtx, tgt.cfg, s.cfg.Dial, tgt.limitsDSN)
	if err != nil {
		return err
	}
	defer func() { closeConn(conn, err != nil) }()
	if !tgt.standby {
		if err := checkPrimary(startCtx, conn); err != nil {
			return err
		}
	}
	if tgt.fence != 0 {
		if reached, err := fenceReached(startCtx, conn, s.cfg.Slot, tgt.fence); err != nil || reached {
			return cmp.Or(err, errFenceReached)
		}
	}
	set, err := s.sessionSettings(startCtx, conn)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(startCtx, conn, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + s.cfg.Publication + "'", "messages 'true'"},
	})
	if err != nil {
		return s.replicationError(err)
	}
	if s.standby {
		s.log.Info().Str("slot", s.cfg.Slot).Msg("slot is free; taking over")
		s.standby = false
	}
	s.log.Info().Str("slot", s.cfg.Slot).Str("confirmed", s.tracker.Confirmable().String()).
		Dur("replication_timeout", set.timeout).Msg("streaming")
	s.setWaiting(false, nil)
	s.setStreaming(true)
	s.sessions++
	s.from.Store(uint64(set.from))
	s.current.Store(s.sessions)
	s.since = time.Now()
	l := &loop{s: s, conn: conn, out: out, dec: NewDecoder(s.schema), interval: set.interval, session: s.sessions,
		started: set.started, quiet: silence{timeout: set.timeout}, fence: tgt.fence}
	return l.run(ctx, drained)
}

// closeConn ends a session's connection. After a failure the socket may be frozen, so it is
// closed at once instead of after a Terminate message that could wait on it.
func closeConn(conn *pgconn.PgConn, failed bool) {
	if failed {
		_ = conn.Conn().Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func (s *Stream) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, badDSN(err)
	}
	return connectReplication(ctx, cfg, s.cfg.Dial, s.cfg.DSN)
}

// settings are a session's timings.
type settings struct {
	interval time.Duration // status interval: the configured one, or wal_sender_timeout/3 up to 10s
	timeout  time.Duration // replication timeout: the configured one, or wal_sender_timeout, or the default
	started  time.Time     // the server's clock as the session starts
	from     pglogrepl.LSN // the slot's confirmed position as the session starts
}

// sessionSettings reads wal_sender_timeout, the server's clock and, unless Config.Schema names
// it, the schema to decode, and derives the settings.
func (s *Stream) sessionSettings(ctx context.Context, conn *pgconn.PgConn) (settings, error) {
	res, err := conn.Exec(ctx, `SELECT setting, (extract(epoch FROM now()) * 1000000)::bigint, coalesce(current_schema(), ''),
		coalesce((SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '`+
		strings.ReplaceAll(s.cfg.Slot, "'", "''")+`'), '0/0')
		FROM pg_settings WHERE name = 'wal_sender_timeout'`).ReadAll()
	if err != nil {
		return settings{}, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	set := settings{interval: 10 * time.Second, timeout: s.cfg.ReplicationTimeout, started: time.Now()}
	if len(res) == 1 && len(res[0].Rows) == 1 {
		row := res[0].Rows[0]
		if s.schema = s.cfg.Schema; s.schema == "" {
			s.schema = string(row[2])
		}
		if ms, err := strconv.Atoi(string(row[0])); err == nil && ms > 0 {
			walSenderTimeout := time.Duration(ms) * time.Millisecond
			set.interval = min(set.interval, walSenderTimeout/3)
			set.timeout = cmp.Or(set.timeout, walSenderTimeout)
		}
		if us, err := strconv.ParseInt(string(row[1]), 10, 64); err == nil {
			set.started = time.UnixMicro(us)
		}
		if lsn, err := pglogrepl.ParseLSN(string(row[3])); err == nil {
			set.from = lsn
		}
	}
	if s.schema == "" {
		return set, fmt.Errorf("%w: the replication connection has no current_schema() (its search_path names no schema "+
			"that exists): name the schema of the relay's tables (Config.Schema), or fix the role's search_path", ErrSchema)
	}
	set.timeout = cmp.Or(set.timeout, DefaultReplicationTimeout)
	if s.cfg.StatusInterval > 0 {
		set.interval = s.cfg.StatusInterval
	}
	return set, nil
}

// replicationError classifies an error the server sent on the replication connection, when
// START_REPLICATION is refused or as an ErrorResponse in the middle of the stream: a slot in
// use, invalidated or gone, or a missing privilege. Anything else is a lost connection.
func (s *Stream) replicationError(err error) error {
	switch sqlstate(err) {
	case pgerrcode.ObjectInUse:
		return errSlotActive
	case pgerrcode.ObjectNotInPrerequisiteState:
		return slotInvalidError(s.cfg.Slot)
	case pgerrcode.UndefinedObject:
		if s.move != nil {
			return s.oldSlotGone(err)
		}
		return s.undefinedObject(err)
	case pgerrcode.InsufficientPrivilege:
		return fmt.Errorf("%w: %v", ErrNoPrivilege, err)
	}
	return fmt.Errorf("replication connection: %w", err)
}

// loop is one connection's read loop. Only its goroutine touches conn.
type loop struct {
	s        *Stream
	conn     *pgconn.PgConn
	out      chan<- *Tx
	dec      *Decoder
	interval time.Duration
	session  uint64
	started  time.Time // server clock at the session's start

	sent   pglogrepl.LSN // last position sent in a status update
	sentAt time.Time
	walEnd pglogrepl.LSN // server WAL end from the last keepalive
	quiet  silence       // how long reading has heard nothing

	fence   pglogrepl.LSN // on a move's old slot: its fence (move.go); 0 otherwise
	atFence bool          // a status update confirmed the fence

	began time.Time // with a Tracer: when the open transaction's BEGIN was read
}

func (l *loop) run(ctx context.Context, drained <-chan struct{}) error {
	l.quiet.heard(time.Now())
	if err := l.status(false); err != nil {
		return err
	}
	// A read in progress ends at once on cancellation, not at its deadline.
	stop := context.AfterFunc(ctx, func() { _ = l.conn.Conn().SetReadDeadline(time.Now()) })
	defer stop()
	for ctx.Err() == nil {
		if l.s.pubLost.Load() {
			return errPublicationGone // classify handles it once the connection is closed
		}
		if l.atFence {
			return l.endAtFence()
		}
		if l.s.tracker.Full() {
			if err := l.paused(ctx); err != nil {
				return err
			}
			l.quiet.heard(time.Now()) // not reading meanwhile: the wait for the server starts now
			continue
		}
		if err := l.receive(ctx); err != nil {
			return err
		}
	}
	return l.finish(drained)
}

// receive reads one message, or times out to send a status update or a probe, or finds the
// connection dead.
func (l *loop) receive(ctx context.Context) error {
	if err := l.liveness(); err != nil {
		return err
	}
	if err := l.conn.Conn().SetReadDeadline(l.deadline()); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // cancelled while the deadline was set: the caller's loop ends
	}
	msg, err := l.conn.ReceiveMessage(context.Background())
	if isTimeout(err) {
		return l.maybeStatus()
	}
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if err := l.handle(ctx, msg); err != nil {
		return err
	}
	l.quiet.heard(time.Now()) // after handle, which may have waited on the publisher
	return l.maybeStatus()
}

// liveness finds the connection dead after a whole replication timeout of silence, and probes
// it before that: a status update with the reply-requested flag, which a live walsender
// answers with a keepalive. A frozen socket accepts the probe and never answers.
func (l *loop) liveness() error {
	now := time.Now()
	if l.quiet.dead(now) {
		return fmt.Errorf("%w for %s, probes included; closing the connection", ErrReplicationTimeout, l.quiet.timeout)
	}
	if l.quiet.probeDue(now) {
		l.quiet.probed = now
		return l.status(true)
	}
	return nil
}

// deadline is when to stop waiting for a message: soon while deliveries may progress, so their
// confirmation goes out promptly; at the next periodic update when idle.
func (l *loop) deadline() time.Time {
	next := l.sentAt.Add(l.interval)
	if probe := l.quiet.next(); probe.Before(next) {
		next = probe
	}
	if outstanding, confirmable := l.s.tracker.progress(); outstanding > 0 || confirmable != l.sent {
		if soon := time.Now().Add(l.s.cfg.ConfirmDelay); soon.Before(next) {
			next = soon
		}
	}
	return next
}

func (l *loop) handle(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		return l.copyData(ctx, msg.Data)
	case *pgproto3.ErrorResponse:
		return l.s.replicationError(pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return errors.New("server ended replication")
	}
	return nil
}

func (l *loop) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("keepalive: %w", err)
		}
		l.keepalive(ka.ServerWALEnd)
		if ka.ReplyRequested {
			return l.status(false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("xlog data: %w", err)
		}
		if l.s.cfg.Tracer != nil && !l.dec.InTx() {
			l.began = time.Now() // the message that opens a transaction: its BEGIN
		}
		tx, err := l.dec.Decode(xld.WALData)
		if err != nil {
			return l.s.decodeError(xld.WALStart, err)
		}
		if tx != nil {
			return l.committed(ctx, tx)
		}
	}
	return nil
}

// keepalive records the server's WAL end and, when nothing is outstanding and no transaction
// is open, lets the slot advance to it (the idle-WAL rule).
func (l *loop) keepalive(walEnd pglogrepl.LSN) {
	l.walEnd = max(l.walEnd, walEnd)
	l.s.m.ServerWALEnd.Set(float64(l.walEnd))
	if !l.dec.InTx() {
		l.s.tracker.AdvanceIfIdle(l.walEnd)
	}
	l.updateLag()
}

func (l *loop) committed(ctx context.Context, tx *Tx) error {
	s := l.s
	if tx.EndLSN <= s.lastEnd {
		s.m.TxSkipped.Inc()
		return nil // received before a reconnect: already delivered or on its way
	}
	s.lastEnd = tx.EndLSN
	tx.Session, tx.Resent = l.session, tx.CommitTime.Before(l.started)
	s.traceTx(tx, l.began) // before any other goroutine sees tx's events
	l.walEnd = max(l.walEnd, tx.EndLSN)
	s.tracker.Add(tx)
	// A control record has always counted as an event received.
	s.m.EventsReceived.Add(float64(len(tx.Events) + len(tx.Controls)))
	if len(tx.Events)+len(tx.Controls) == 0 {
		return nil
	}
	return l.handoff(ctx, tx)
}

// handoff passes tx on, pinging the server while the publisher is busy.
func (l *loop) handoff(ctx context.Context, tx *Tx) error {
	select {
	case l.out <- tx:
		return nil
	default:
	}
	for {
		select {
		case l.out <- tx:
			return nil
		case <-ctx.Done():
			return nil // not delivered: it stays unconfirmed and is resent next time
		case <-time.After(l.interval):
			if err := l.status(false); err != nil {
				return err
			}
		}
	}
}

// paused waits, without reading, for buffer space, sending status updates meanwhile.
func (l *loop) paused(ctx context.Context) error {
	l.s.m.ReadPaused.Set(1)
	defer l.s.m.ReadPaused.Set(0)
	ticker := time.NewTicker(min(l.interval, l.s.cfg.ConfirmDelay))
	defer ticker.Stop()
	for l.s.tracker.Full() && !l.atFence {
		select {
		case <-ctx.Done():
			return nil
		case <-l.s.tracker.Wake():
		case <-ticker.C:
		}
		if err := l.maybeStatus(); err != nil {
			return err
		}
	}
	return nil
}

// finish keeps the connection alive until the publisher has drained, then confirms the final
// position and ends replication.
func (l *loop) finish(drained <-chan struct{}) error {
	ticker := time.NewTicker(min(l.interval, l.s.cfg.ConfirmDelay))
	defer ticker.Stop()
	for done := false; !done; {
		select {
		case <-drained:
			done = true
		case <-ticker.C:
		}
		if err := l.maybeStatus(); err != nil {
			return err
		}
	}
	if err := l.status(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.conn.Conn().SetDeadline(time.Time{}) // the read loop's deadlines are stale; ctx bounds what follows
	if _, err := pglogrepl.SendStandbyCopyDone(ctx, l.conn); err != nil {
		l.s.log.Debug().Err(err).Msg("end replication")
	}
	l.s.log.Info().Str("confirmed", l.sent.String()).Msg("replication ended cleanly")
	return nil
}

// maybeStatus sends an update when the periodic interval is due, or when delivery progress
// has waited ConfirmDelay.
func (l *loop) maybeStatus() error {
	now := time.Now()
	due := now.Sub(l.sentAt) >= l.interval
	if !due && l.s.tracker.Confirmable() != l.sent && now.Sub(l.sentAt) >= l.s.cfg.ConfirmDelay {
		due = true
	}
	if !due {
		return nil
	}
	return l.status(false)
}

func (l *loop) status(reply bool) error {
	pos := l.s.tracker.Confirmable()
	// A frozen socket must not hang the loop: the write fails at the deadline instead.
	if err := l.conn.Conn().SetWriteDeadline(time.Now().Add(l.quiet.timeout)); err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), l.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos,
		ClientTime: time.Now(), ReplyRequested: reply,
	})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	l.sent, l.sentAt = pos, time.Now()
	l.atFence = l.fence != 0 && pos >= l.fence
	l.s.m.StatusUpdates.Inc()
	l.s.m.ConfirmedLSN.Set(float64(pos))
	l.updateLag()
	return nil
}

func (l *loop) updateLag() {
	if l.walEnd > l.sent {
		l.s.m.LagBytes.Set(float64(l.walEnd - l.sent))
	} else {
		l.s.m.LagBytes.Set(0)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && (pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout()))
}
