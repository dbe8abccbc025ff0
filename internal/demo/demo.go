// Package demo runs the whole pipeline in one process, so that a first-time user can watch it
// work: a database, the schema, a small warehouse consumer built on package inbox, the relay,
// and a producer placing orders at a steady rate, with a one-screen live status.
//
// # What it shows
//
// Every order is a row in orders and an event in outbox_events, written in one transaction. The
// relay delivers each event to the warehouse, whose inbox reserves stock once per event. Every
// FailEvery the warehouse fails for FailFor, so deliveries are retried and then catch up. And one
// in LoseEvery accepted deliveries has its 200 replaced by a 502 after the warehouse committed,
// as when the network fails on the way back: the relay delivers that event again and the inbox
// absorbs the duplicate. At the end delivered and reservations both equal written: delivery at
// least once, effect exactly once.
//
// # Partner endpoints
//
// A third pipeline runs with endpoints: one slot fanned out to the partners of newPartners,
// rows of outbox_endpoints added before the relay starts, each with a secret of its own and a
// receiver (partners.go) that verifies its signature and counts each event once. Each order's
// event carries its customer's tenant (tenantOf), so acme, globex and initech receive their own
// tenant's orders (initech's signed the Standard Webhooks way) and ledger every order. The drain
// waits for each partner to have what its subscription gives it, and the end prints it.
//
// # With NATS JetStream
//
// With Config.NATS, the warehouse pipeline publishes to a real nats-server instead: the demo
// starts the binary (nats-server on PATH, or $NATS_SERVER_BIN) with JetStream on a temporary
// store, the relay creates the stream OUTBOX, and the warehouse is a durable JetStream consumer
// that applies each message once in one transaction with inbox_events (as examples/natsconsumer)
// and then acks. The outage is then the broker's: every FailEvery the server is killed
// (SIGKILL) for FailFor and started again on the same port and store, and the relay retries
// its publishes until it is back. One in LoseEvery of the consumer's acks is lost (a nak after
// the commit), so JetStream redelivers and the inbox absorbs the duplicate. The audit pipeline
// stays a webhook.
//
// # What it leaves behind
//
// When it started its own cluster, nothing: Run stops the relay and the consumer, stops the
// server and removes its directory, on a cancelled context (Ctrl-C) too. In a database it was
// given, it drops the slots and publications of its three pipelines (outbox_relay_demo,
// outbox_relay_demo_big for the filtered audit pipeline that receives big orders, and
// outbox_relay_demo_partners for the partners) and removes its endpoints, and keeps the tables
// and the rows it wrote: orders, outbox_events, inbox_events and stock_reservations. The
// nats-server of NATS mode is always its own: stopped, and its store removed, at the end.
package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Config is what Run takes. The zero value runs a throwaway cluster until ctx is done, printing
// nothing.
type Config struct {
	// DSN names the database to use; it needs wal_level=logical. If empty, Run starts a throwaway
	// cluster from the local server binaries (see package pgcluster) and removes it at the end.
	DSN string
	// Out receives the status and the summary line. If nil, nothing is printed.
	Out io.Writer
	// IsTTY redraws the status in place with ANSI escapes. If false, Run prints a progress line
	// every ProgressInterval instead.
	IsTTY bool
	// Duration is how long orders are written, counted from when everything runs. If zero,
	// until ctx is done.
	Duration time.Duration
	// Rate is orders written per second. If zero, DefaultRate.
	Rate float64
	// FailEvery is the time between the consumer's outages. If zero, DefaultFailEvery.
	FailEvery time.Duration
	// FailFor is how long each outage lasts. If zero, DefaultFailFor.
	FailFor time.Duration
	// LoseEvery makes one in LoseEvery accepted deliveries lose its answer after the consumer
	// committed. If zero, DefaultLoseEvery.
	LoseEvery int
	// ProgressInterval is the time between progress lines when IsTTY is false. If zero, 2s.
	ProgressInterval time.Duration
	// DrainTimeout bounds how long Run waits, once writing stops, for deliveries to catch up.
	// If zero, 15s.
	DrainTimeout time.Duration
	// ClusterStarted, if set, is called with the throwaway cluster's directory once its server
	// runs.
	ClusterStarted func(dir string)
	// NATS publishes the warehouse pipeline to NATS JetStream on a nats-server the demo starts
	// (see the package doc), and makes its outages broker restarts. False (the zero value): the
	// warehouse is a webhook consumer.
	NATS bool
	// NATSStarted, if set, is called with the nats-server's store directory and URL once it first
	// runs (NATS mode only).
	NATSStarted func(dir, url string)
}

// Defaults for Config fields left zero.
const (
	DefaultRate      = 50
	DefaultFailEvery = 20 * time.Second
	DefaultFailFor   = 4 * time.Second
	// DefaultLoseEvery is rare enough that the p99 latency shows the relay, not the redeliveries.
	DefaultLoseEvery = 200
)

func (c *Config) defaults() {
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRate
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDur(&c.FailEvery, DefaultFailEvery)
	setDur(&c.FailFor, DefaultFailFor)
	setDur(&c.ProgressInterval, 2*time.Second)
	setDur(&c.DrainTimeout, 15*time.Second)
	if c.LoseEvery <= 0 {
		c.LoseEvery = DefaultLoseEvery
	}
}

// Relay settings that make retries and catch-up quick enough to watch.
const (
	relayRetryMin = 100 * time.Millisecond
	relayRetryMax = time.Second
	relayShutdown = 5 * time.Second
	// refresh is how often the status is sampled (and redrawn on a terminal).
	refresh = 500 * time.Millisecond
	// p99Window is how far back the live p99 looks.
	p99Window = 10 * time.Second
)

// Run runs the demo until ctx is done or cfg.Duration has passed, waits for the last deliveries,
// removes everything it started, and prints a summary line. A cancelled ctx is the normal way to
// stop it, and then Run returns nil. With no DSN and no server binaries installed, it returns an
// error that says how to install them (errors.Is(err, pgcluster.ErrNoBinaries)); with NATS and
// no nats-server binary, likewise (errors.Is(err, ErrNoNATSServer)), before starting anything.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	d := &demo{cfg: cfg, out: cfg.Out, notes: make(chan string, 16), relayLog: newLogTail(20)}
	err := d.run(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	if cerr := d.teardown(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	switch {
	case d.final != nil:
		d.println(d.goodbye())
		for _, l := range d.partnerLines(d.final.partners) {
			d.println(l)
		}
		d.println(summary(*d.final, d.final.at.Sub(d.started)))
	case err == nil && d.clusterDir != "":
		d.println("demo: stopped while starting; removed the cluster in " + d.clusterDir)
	}
	return err
}

// demo is one run: what it started, in order, and what it has seen.
type demo struct {
	cfg      Config
	out      io.Writer
	cleanups []cleanup

	clusterDir   string
	dsn          string
	secret       string
	pool         *pgxpool.Pool
	consumer     *warehouse
	consumerAddr string
	lose         *loseAcks
	consumerRun  *task
	audit        *audit
	auditAddr    string
	partners     []*partner // the partners pipeline's endpoints and their receivers
	partnersAddr string
	relayRun     *task
	relayLog     *logTail
	registry     *prometheus.Registry
	metricsAddr  string
	writer       *writer
	outages      *outages
	notes        chan string

	nats          *natsServer    // NATS mode: the broker
	natsWarehouse *natsWarehouse // NATS mode: the consumer, instead of consumer

	baseline int64 // stock_reservations rows before this run
	started  time.Time
	last     sample   // the latest sample
	history  []sample // samples of the last p99Window, oldest first
	note     string   // the latest event, for the status
	final    *sample
	screen   screen
}

func (d *demo) run(ctx context.Context) error {
	if err := d.setup(ctx); err != nil {
		return err
	}
	d.header()
	return d.loop(ctx)
}

// setup starts everything but the producer: database, schema, consumer, relay.
func (d *demo) setup(ctx context.Context) error {
	var natsBin string
	if d.cfg.NATS {
		// Before anything starts: a missing binary is the first thing to fix.
		var err error
		if natsBin, err = natsServerBin(ctx); err != nil {
			return err
		}
	}
	d.dsn = d.cfg.DSN
	if d.dsn == "" {
		var err error
		if d.dsn, err = d.throwaway(ctx); err != nil {
			return err
		}
	}
	if _, err := migrations.Up(ctx, d.dsn); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, d.dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	d.pool = pool
	d.cleanup("close the pool", func(context.Context) error { pool.Close(); return nil })
	if _, err := pool.Exec(ctx, ordersTable); err != nil {
		return fmt.Errorf("create table orders: %w", err)
	}
	if d.secret, err = newSecret(); err != nil {
		return err
	}
	if d.cfg.NATS {
		if err := d.startBroker(ctx, natsBin); err != nil {
			return err
		}
		if err := d.startNATSConsumer(ctx); err != nil {
			return err
		}
	} else if err := d.startConsumer(ctx); err != nil {
		return err
	}
	if n, err := reservations(ctx, pool); err == nil {
		d.baseline = int64(n)
	}
	if d.cfg.DSN != "" {
		// Registered before the relay starts, so it runs after the relay has stopped.
		d.cleanup("drop the demo's slot and publication", func(ctx context.Context) error { return dropSlots(ctx, pool) })
		d.cleanup("remove the demo's endpoints", d.removeEndpoints)
	}
	if err := d.startAudit(ctx); err != nil {
		return err
	}
	if err := d.startPartners(ctx); err != nil {
		return err
	}
	return d.startRelay(ctx)
}

// startBroker starts the nats-server of NATS mode; it is stopped, and its store removed, after
// the relay and the consumer.
func (d *demo) startBroker(ctx context.Context, bin string) error {
	d.println("demo: starting nats-server with JetStream (" + bin + ")")
	s, err := startNATS(ctx, bin)
	if err != nil {
		return err
	}
	d.nats = s
	d.cleanup("stop nats-server and remove its store", func(context.Context) error { return s.Close() })
	if d.cfg.NATSStarted != nil {
		d.cfg.NATSStarted(s.dir, s.URL())
	}
	return nil
}

func newSecret() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook secret: %w", err)
	}
	return fmt.Sprintf("%x", b), nil
}

func (d *demo) println(s string) {
	if d.cfg.IsTTY && d.screen.drawn > 0 {
		fmt.Fprint(d.out, d.screen.release())
	}
	fmt.Fprintln(d.out, s)
}
