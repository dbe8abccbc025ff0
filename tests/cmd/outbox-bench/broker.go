package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker rows: the same backlog as the drain row, drained by the relay into a broker that
// runs inside this process (so its CPU is the bench's own: "Self"), sharing the machine's cores.
const (
	rowNATS  = "Backlog drain → NATS JetStream (file storage, 1 node)"
	rowKafka = "Backlog drain → Kafka (kfake, in-process)"
	// The batched broker rows: batches of up to 100 messages published at once, one event per
	// aggregate in each (so the batch holds 100 aggregates' heads).
	rowNATSBatch    = "Backlog drain → NATS JetStream, batch 100"
	rowNATSBatchOff = "Backlog drain → NATS JetStream, batch 100, --marks off"
	rowKafkaBatch   = "Backlog drain → Kafka (kfake), batch 100"
	// brokerTopic is where the backlog's events go: the default templates with the backlog's
	// aggregate type, order.
	brokerTopic = "outbox.event.order"
)

// brokerSink is a broker for one drain: the relay's flags to reach it, and how many messages
// it holds.
type brokerSink interface {
	args() []string
	count(ctx context.Context) (int64, error)
	close()
}

// natsSink is a nats-server with JetStream on file storage, and the stream OUTBOX.
type natsSink struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	dir string
}

func startNATS(ctx context.Context) (*natsSink, error) {
	dir, err := os.MkdirTemp("", "outbox-bench-nats-")
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv.Start()
	s := &natsSink{srv: srv, dir: dir}
	if !srv.ReadyForConnections(30 * time.Second) {
		s.close()
		return nil, fmt.Errorf("nats-server not ready")
	}
	if s.nc, err = nats.Connect(srv.ClientURL()); err != nil {
		s.close()
		return nil, err
	}
	s.js, _ = jetstream.New(s.nc)
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *natsSink) args() []string { return []string{"--nats-url", s.srv.ClientURL()} }

func (s *natsSink) count(ctx context.Context) (int64, error) {
	st, err := s.js.Stream(ctx, "OUTBOX")
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.State.Msgs), nil
}

func (s *natsSink) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	os.RemoveAll(s.dir)
}

// kafkaSink is franz-go's kfake cluster (one broker, in memory) with the backlog's topic.
type kafkaSink struct {
	c  *kfake.Cluster
	cl *kgo.Client
}

func startKafka() (*kafkaSink, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, brokerTopic))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &kafkaSink{c: c, cl: cl}, nil
}

func (s *kafkaSink) args() []string { return []string{"--kafka-brokers", s.c.ListenAddrs()[0]} }

func (s *kafkaSink) count(ctx context.Context) (int64, error) {
	offs, err := kadm.NewClient(s.cl).ListEndOffsets(ctx, brokerTopic)
	if err != nil {
		return 0, err
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

func (s *kafkaSink) close() { s.cl.Close(); s.c.Close() }

// brokerDrain writes a backlog with the relay stopped, then starts the relay against sink and
// measures until the broker holds every event: the rate from the first message seen to the
// last (polled every 10ms), the relay's CPU and peak RSS, and the machine's load.
func (e *env) brokerDrain(ctx context.Context, prefix string, events, aggregates int, sink brokerSink, args []string) (drainResult, error) {
	res := drainResult{Events: events, Aggregates: aggregates}
	db, err := newBenchDB(ctx, e.cluster, prefix, relaySlot)
	if err != nil {
		return res, err
	}
	defer db.drop()
	e.logf("%s: writing %d events over %d aggregates", prefix, events, aggregates)
	if _, err := db.writeBacklog(ctx, events, aggregates); err != nil {
		return res, err
	}
	e.logf("%s: relay draining", prefix)
	before, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	r, err := startRelay(ctx, e.relayBin, relayTarget{DSN: db.dsn, Slot: relaySlot, Publication: benchPublication,
		DestArgs: sink.args(), Args: args})
	if err != nil {
		return res, err
	}
	defer r.Stop(relayStopGrace)
	var firstAt, lastAt, progressAt time.Time
	var firstN, n, lastN int64
	for n < int64(events) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := sink.count(qctx)
		cancel()
		now := time.Now()
		if err == nil {
			n = got
		}
		if n > 0 && firstAt.IsZero() {
			firstAt, firstN = now, n
		}
		if n != lastN || progressAt.IsZero() {
			lastN, progressAt = n, now
		}
		if now.Sub(progressAt) > stallLimit {
			return res, fmt.Errorf("the broker holds %d of %d events and nothing arrived for %s", n, events, stallLimit)
		}
		lastAt = now
		if n < int64(events) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(settle)
	if res.Relay, err = r.usage(); err != nil {
		return res, err
	}
	after, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	res.Load = loadBetween(before, after)
	if w := lastAt.Sub(firstAt); w > 0 {
		res.Rate = float64(n-firstN) / w.Seconds()
	}
	res.Startup = firstAt.Sub(r.started)
	res.Stats.Duplicates = n - int64(events)
	return res, stopRelay(r)
}

// brokerRow runs one broker drain on a fresh broker, with the relay flags args.
func (e *env) brokerRow(ctx context.Context, prefix string, start func(context.Context) (brokerSink, error), args ...string) (drainResult, error) {
	sink, err := start(ctx)
	if err != nil {
		return drainResult{}, fmt.Errorf("start the broker: %w", err)
	}
	defer sink.close()
	return e.brokerDrain(ctx, prefix, e.cfg.Events, 1000, sink, args)
}

// brokerRows are the broker drains, in table order.
var brokerRows = []struct {
	row, prefix string
	nats        bool
	args        []string
}{
	{rowNATS, "nats", true, nil},
	{rowNATSBatch, "nats_batch", true, batchArgs},
	{rowNATSBatchOff, "nats_batch_marks_off", true, append(append([]string(nil), batchArgs...), "--marks", "off")},
	{rowKafka, "kafka", false, nil},
	{rowKafkaBatch, "kafka_batch", false, batchArgs},
}

// brokerCells are a broker row's cells: like a drain row's, with the broker's CPU (this
// process's) and the ratio to the raw decode of the drain row's backlog.
func (r *results) brokerCells(d *drainResult) []string {
	notes := []string{fmt.Sprintf("broker (in the bench process) CPU-s per 100k %s", per100k(d.Load.Self, d.Events))}
	if r.raw != nil && r.raw.Rate > 0 {
		notes = append([]string{fmt.Sprintf("broker drain/raw decode %.2f", d.Rate/r.raw.Rate)}, notes...)
	}
	notes = append(notes, fmt.Sprintf("first message %s after relay start", d.Startup.Round(time.Millisecond)))
	if d.Stats.Duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicates", d.Stats.Duplicates))
	}
	notes = appendOther(notes, d.Load.OtherCPUs(d.Relay.CPU))
	return []string{thousands(float64(d.Events)), thousands(float64(d.Aggregates)), thousands(d.Rate) + " events/s",
		dash, per100k(d.Relay.CPU, d.Events), mb(d.Relay.PeakRSS), dash, pgCell(d.Load.PG, d.Events), strings.Join(notes, "; ")}
}

// natsTargets are the NATS rows' target: each drain at least 0.4 of the raw decode of the same
// backlog, the broker sharing the machine's cores; one line per NATS row, since the settings
// decide.
func (r *results) natsTargets() []string {
	const aim = 0.4
	var out []string
	for _, b := range brokerRows {
		if !b.nats || !r.cfg.selected(b.row) {
			continue
		}
		d := r.brokers[b.row]
		settings := "defaults"
		if len(b.args) > 0 {
			settings = strings.Join(b.args, " ")
		}
		if d == nil || r.raw == nil || r.raw.Rate <= 0 {
			out = append(out, fmt.Sprintf("MISS NATS drain (%s) ≥ 0.4 × pg_recvlogical raw decode: no data", settings))
			continue
		}
		ratio := d.Rate / r.raw.Rate
		out = append(out, fmt.Sprintf("%s NATS drain (%s) ≥ %.1f × pg_recvlogical raw decode: %.2f (%s vs %s events/s; relay CPU-s per 100k %s)",
			verdict(ratio >= aim), settings, aim, ratio, thousands(d.Rate), thousands(r.raw.Rate), per100k(d.Relay.CPU, d.Events)))
	}
	return out
}
