package demo

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// loop writes orders and shows the status until ctx is done, Duration has passed or a part
// fails, then waits for the last deliveries and takes the final sample.
func (d *demo) loop(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, d.cfg.Duration)
		defer cancel()
	}
	d.started = time.Now()
	d.writer = &writer{pool: d.pool, rate: d.cfg.Rate}
	d.outages = &outages{every: d.cfg.FailEvery, length: d.cfg.FailFor, consumer: d.consumer, notes: d.notes,
		downNote: fmt.Sprintf("consumer failing on purpose for %s; the relay retries", d.cfg.FailFor),
		upNote:   "consumer recovered; the relay catches up"}
	var brokerErr <-chan error // nil, so never ready, without a broker
	if d.nats != nil {
		d.outages.consumer, brokerErr = d.nats, d.nats.failed
		d.outages.downNote = fmt.Sprintf("nats-server killed (SIGKILL) for %s; the relay retries its publishes", d.cfg.FailFor)
		d.outages.upNote = "nats-server restarted on the same port and store; the relay and the consumer catch up"
	}
	writeErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := d.writer.run(runCtx); err != nil {
			writeErr <- err
		}
	}()
	go func() { defer wg.Done(); d.outages.run(runCtx) }()
	err := d.watch(runCtx, writeErr, brokerErr)
	cancel()
	wg.Wait()
	if err == nil {
		err = d.drain()
	}
	final := d.sample(context.Background())
	d.final = &final
	if d.cfg.IsTTY {
		d.redraw(d.window(final))
	}
	return err
}

// watch shows the status until ctx is done or a part fails.
func (d *demo) watch(ctx context.Context, writeErr, brokerErr <-chan error) error {
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	d.history = []sample{d.sample(ctx)}
	d.note = "started"
	lastLine := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-writeErr:
			return err
		case err := <-brokerErr:
			return err
		case <-d.relayRun.done:
			return d.relayFailed()
		case <-d.consumerRun.done:
			return d.consumerRun.err // serve returns only on ctx or a listener error
		case n := <-d.notes:
			d.event(n)
			continue
		case <-tick.C:
		}
		w := d.window(d.sample(ctx))
		switch {
		case d.cfg.IsTTY:
			d.redraw(w)
		case time.Since(lastLine) >= d.cfg.ProgressInterval:
			d.println(w.line())
			lastLine = time.Now()
		}
	}
}

// event shows something that happened: on a terminal in the status, else on a line of its own.
func (d *demo) event(s string) {
	d.note = time.Now().Format(time.TimeOnly) + " " + s
	if !d.cfg.IsTTY {
		d.println("demo: " + s)
	}
}

// window adds s to the history and returns it against the sample about p99Window older.
func (d *demo) window(s sample) window {
	d.history = append(d.history, s)
	for len(d.history) > 2 && s.at.Sub(d.history[1].at) >= p99Window {
		d.history = d.history[1:]
	}
	return window{now: s, base: d.history[0], elapsed: s.at.Sub(d.started)}
}

func (d *demo) redraw(w window) { fmt.Fprint(d.out, d.screen.draw(w.block(d.note))) }

// drain waits, up to DrainTimeout, until everything written was delivered and reserved.
func (d *demo) drain() error {
	deadline := time.NewTimer(d.cfg.DrainTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	said := false
	for {
		s := d.sample(context.Background())
		if s.delivered >= s.written && s.reservations >= s.written && s.audited >= s.bigWritten && s.partners.caughtUp() {
			if said {
				d.event("stopped writing; everything written was delivered")
			}
			return nil
		}
		if !said {
			d.event(fmt.Sprintf("stopped writing; waiting up to %s for the last deliveries", d.cfg.DrainTimeout))
			said = true
		}
		if d.cfg.IsTTY {
			d.redraw(d.window(s))
		}
		select {
		case <-deadline.C:
			d.println(fmt.Sprintf("demo: %d events not delivered within %s", max(s.written-s.delivered, 0), d.cfg.DrainTimeout))
			if d.natsWarehouse != nil && s.reservations < s.written {
				d.println(fmt.Sprintf("demo: %d events not applied by the consumer (no stock reserved); its last errors:\n%s",
					s.written-s.reservations, d.natsWarehouse.errs.String()))
			}
			return nil
		case <-d.relayRun.done:
			return d.relayFailed()
		case <-tick.C:
		}
	}
}

// sample reads the counters of every part. A failed count of reservations keeps the last one.
func (d *demo) sample(ctx context.Context) sample {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	s := sample{at: time.Now(), reservations: d.last.reservations}
	if families, err := d.registry.Gather(); err == nil {
		s.readRelay(families)
	}
	if w := d.natsWarehouse; w != nil {
		s.nats, s.duplicates, s.lost = true, w.duplicates.Load(), w.lost.Load()
	} else {
		s.duplicates = int64(d.consumer.Stats().Duplicates)
		s.lost = d.lose.lost.Load()
	}
	if n, err := reservations(ctx, d.pool); err == nil {
		s.reservations = int64(n) - d.baseline
	}
	// Read last, so that what was delivered and reserved is never ahead of what was written.
	s.partners = d.countPartners()
	s.written, s.bigWritten = d.writer.written.Load(), d.writer.big.Load()
	if d.nats != nil {
		s.failing = d.nats.Failing()
	} else {
		s.failing = d.consumer.Failing()
	}
	s.outageLeft, s.nextOutage = d.outages.timing(s.at)
	d.last = s
	return s
}

// header says what runs where, once, before the status.
func (d *demo) header() {
	where := "(your database: the demo drops its slots and publications " + Slot + ", " + AuditSlot + " and " + PartnersSlot +
		", and removes its endpoints, at the end)"
	if d.clusterDir != "" {
		where = "(throwaway cluster in " + d.clusterDir + ", removed at the end)"
	}
	until := "until Ctrl-C"
	if d.cfg.Duration > 0 {
		until = "for " + d.cfg.Duration.String() + " (or until Ctrl-C)"
	}
	if d.nats != nil {
		d.println("outbox-relay demo: orders → outbox_events → relay → NATS JetStream → durable consumer → inbox → stock_reservations")
	} else {
		d.println("outbox-relay demo: orders → outbox_events → relay → signed POST → inbox → stock_reservations")
	}
	d.println("  database  " + d.dsn + " " + where)
	if d.nats != nil {
		d.println("  nats      nats-server at " + d.nats.URL() + " (JetStream store in " + d.nats.dir + ", removed at the end)")
	}
	d.println("  relay     metrics at http://" + d.metricsAddr + "/metrics; three pipelines:")
	if d.nats != nil {
		d.println("            " + pipelineWarehouse + ": every order to stream " + natsStream + " (subjects " + natsSubjects +
			"), read by the durable consumer " + natsDurable)
	} else {
		d.println("            " + pipelineWarehouse + ": every order to " + d.consumerURL())
	}
	d.println("            " + pipelineAudit + ": only orders with total >= 400 (row filter " + auditFilter + ") to " + d.auditURL())
	d.println("            " + pipelinePartners + ": one slot fanned out to the partner endpoints (rows of outbox_endpoints),")
	d.println("            each with its own secret, at http://" + d.partnersAddr + "/partners/<id>:")
	for _, p := range d.partners {
		d.println(fmt.Sprintf("              %-8s %s", p.id, p.subscription()))
	}
	if d.nats != nil {
		d.println(fmt.Sprintf("  writing   %g orders/s %s; nats-server is killed for %s every %s and restarted,", d.cfg.Rate, until,
			d.cfg.FailFor, d.cfg.FailEvery))
		d.println(fmt.Sprintf("            and 1 in %d of the consumer's acks is lost after it committed", d.cfg.LoseEvery))
	} else {
		d.println(fmt.Sprintf("  writing   %g orders/s %s; the consumer fails for %s every %s,", d.cfg.Rate, until,
			d.cfg.FailFor, d.cfg.FailEvery))
		d.println(fmt.Sprintf("            and 1 in %d of its answers is lost after it committed", d.cfg.LoseEvery))
	}
	d.println("")
}

// goodbye says what teardown removed or kept.
func (d *demo) goodbye() string {
	broker := ""
	if d.nats != nil {
		broker = "; stopped nats-server and removed its store in " + d.nats.dir
	}
	if d.clusterDir != "" {
		return "demo: stopped the relay and the consumer; removed the cluster in " + d.clusterDir + broker
	}
	return "demo: stopped the relay and the consumer; dropped the demo's slots and publications and removed its endpoints" +
		"; the tables orders, outbox_events, inbox_events and stock_reservations keep their rows" + broker
}

// outages makes the consumer (or in NATS mode the broker) fail for length every every, and
// tells when.
type outages struct {
	every, length    time.Duration
	consumer         interface{ SetFailing(bool) }
	downNote, upNote string // what the status says when an outage starts and ends
	notes            chan<- string
	next             atomic.Int64 // unix nanos when the next outage starts
	until            atomic.Int64 // unix nanos when the current outage ends; 0 when none
}

func (o *outages) run(ctx context.Context) {
	defer o.consumer.SetFailing(false)
	for {
		o.next.Store(time.Now().Add(o.every).UnixNano())
		if !sleep(ctx, o.every) {
			return
		}
		o.until.Store(time.Now().Add(o.length).UnixNano())
		o.consumer.SetFailing(true)
		o.note(o.downNote)
		ok := sleep(ctx, o.length)
		o.consumer.SetFailing(false)
		o.until.Store(0)
		if !ok {
			return
		}
		o.note(o.upNote)
	}
}

func (o *outages) note(s string) {
	select {
	case o.notes <- s:
	default: // the status shows the state anyway
	}
}

// timing returns how long the current outage lasts still and when the next one starts.
func (o *outages) timing(now time.Time) (left, next time.Duration) {
	if until := o.until.Load(); until != 0 {
		left = max(time.Unix(0, until).Sub(now), 0)
	}
	if n := o.next.Load(); n != 0 {
		next = max(time.Unix(0, n).Sub(now), 0)
	}
	return left, next
}

// sleep waits for d and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
