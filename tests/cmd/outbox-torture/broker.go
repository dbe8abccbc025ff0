package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/signature"
)

// TORTURE_SINK=nats or kafka (make torture SINK=...) runs the relays against a broker instead
// of the webhook: a nats-server with JetStream on file storage, or franz-go's kfake cluster
// persisted with fsync, both inside this process. A bridge reads the broker in its order and
// posts each message, signed, to the same receiver, retrying until it answers 2xx, so every
// check runs unchanged on what the broker holds: the receiver's log is the broker's content in
// broker order. The receiver's faults then hit the bridge, not the relays, so in this mode they
// are replaced by broker restarts (the broker down for the fault's hold, then back on its data).
//
// The confirm invariant stays sound: before the sampler takes the receiver's mark it reads the
// broker's end (after the slot's position) and waits until the bridge has posted everything
// below it, so whatever the broker held when the position was read is below the mark. A sample
// for which that wait fails (the broker is down) is dropped.

const brokerStream = "OUTBOX"

// broker is the sink of a broker run.
type broker interface {
	relayArgs() []string
	restart(ctx context.Context, hold time.Duration) error
	// end returns the broker's end: per partition, the next position.
	end(ctx context.Context) (map[int32]int64, error)
	close()
}

// bridge copies the broker to the receiver and tracks how far it got.
type bridge struct {
	mu   sync.Mutex
	done map[int32]int64 // per partition, the next position not yet accepted by the receiver
	cond chan struct{}   // closed and replaced on progress
	post func(ctx context.Context, h http.Header, body []byte) error
}

func newBridge(url string) (*bridge, error) {
	keys, err := signature.Keys(signature.XSignature, []string{secret})
	if err != nil {
		return nil, err
	}
	signer := signature.NewSigner(keys)
	client := &http.Client{Timeout: time.Second}
	b := &bridge{done: map[int32]int64{}, cond: make(chan struct{})}
	b.post = func(ctx context.Context, h http.Header, body []byte) error {
		for wait := 10 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			for k, v := range h {
				req.Header[k] = v
			}
			ts := time.Now().Unix()
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Attempt", "1")
			req.Header.Set("X-Timestamp", strconv.FormatInt(ts, 10))
			req.Header.Set("X-Signature", string(signer.AppendX(nil, ts, body)))
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					return nil
				}
			}
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
		}
	}
	return b, nil
}

// advance records that the receiver accepted partition p's message at pos.
func (b *bridge) advance(p int32, pos int64) {
	b.mu.Lock()
	b.done[p] = pos + 1
	close(b.cond)
	b.cond = make(chan struct{})
	b.mu.Unlock()
}

// caughtUp waits until the bridge has passed end, for at most limit.
func (b *bridge) caughtUp(end map[int32]int64, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		b.mu.Lock()
		ok := true
		for p, e := range end {
			if b.done[p] < e {
				ok = false
			}
		}
		c := b.cond
		b.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c:
		case <-deadline:
			return false
		}
	}
}

// startBroker starts the sink named by cfg.Sink and its bridge, and hooks the receiver's mark.
func (t *harness) startBroker(ctx context.Context) (broker, func(), error) {
	var br broker
	var err error
	switch t.cfg.Sink {
	case "nats":
		br, err = startNATSBroker()
	case "kafka":
		br, err = startKafkaBroker()
	default:
		return nil, nil, fmt.Errorf("TORTURE_SINK=%q: set nats or kafka, or leave it empty for the webhook", t.cfg.Sink)
	}
	if err != nil {
		return nil, nil, err
	}
	bg, err := newBridge(t.recv.URL)
	if err != nil {
		br.close()
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		switch b := br.(type) {
		case *natsBroker:
			b.copy(runCtx, bg)
		case *kafkaBroker:
			b.copy(runCtx, bg)
		}
	}()
	t.recv.catchUp = func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		end, err := br.end(cctx)
		cancel()
		return err == nil && bg.caughtUp(end, 10*time.Second)
	}
	return br, func() { stop(); wg.Wait(); br.close() }, nil
}

// brokerRestart is the broker fault: down for hold, then back on its data.
func (t *harness) brokerRestart(ctx context.Context, hold time.Duration) {
	if err := t.broker.restart(ctx, hold); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("broker-restart: %v", err))
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// natsBroker is one nats-server with JetStream on file storage, on a fixed port.
type natsBroker struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
}

func startNATSBroker() (*natsBroker, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outbox-torture-nats-")
	if err != nil {
		return nil, err
	}
	b := &natsBroker{opts: server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}}
	if err := b.start(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *natsBroker) start() error {
	o := b.opts
	srv, err := server.NewServer(&o)
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return errors.New("nats-server not ready")
	}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	return nil
}

func (b *natsBroker) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", b.opts.Port) }

func (b *natsBroker) relayArgs() []string {
	return []string{"--nats-url", b.url(), "--nats-create-stream", brokerStream}
}

func (b *natsBroker) restart(ctx context.Context, hold time.Duration) error {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	sleep(ctx, hold)
	return b.start()
}

func (b *natsBroker) end(ctx context.Context) (map[int32]int64, error) {
	nc, err := nats.Connect(b.url(), nats.Timeout(time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, brokerStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return map[int32]int64{0: 1}, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	return map[int32]int64{0: int64(info.State.LastSeq) + 1}, nil
}

func (b *natsBroker) close() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	_ = os.RemoveAll(b.opts.StoreDir)
}

// copy reads the stream in order from the start and posts each message, resuming after the
// last one posted whenever the connection or the consumer fails.
func (b *natsBroker) copy(ctx context.Context, bg *bridge) {
	next := uint64(1)
	for ctx.Err() == nil {
		if err := b.copyFrom(ctx, bg, &next); err != nil && ctx.Err() == nil {
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

func (b *natsBroker) copyFrom(ctx context.Context, bg *bridge, next *uint64) error {
	nc, err := nats.Connect(b.url(), nats.Timeout(time.Second), nats.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, brokerStream)
	if err != nil {
		return err
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: *next})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		batch, err := c.Fetch(200, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := bg.post(ctx, http.Header(m.Headers()), m.Data()); err != nil {
				return err
			}
			bg.advance(0, int64(md.Sequence.Stream))
			*next = md.Sequence.Stream + 1
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return ctx.Err()
}

// kafkaBroker is a kfake cluster of three brokers, persisted with fsync, on fixed ports.
type kafkaBroker struct {
	mu    sync.Mutex
	ports []int
	dir   string
	c     *kfake.Cluster
}

const kafkaTopic = "outbox.event.order"

func startKafkaBroker() (*kafkaBroker, error) {
	b := &kafkaBroker{}
	for range 3 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		b.ports = append(b.ports, p)
	}
	var err error
	if b.dir, err = os.MkdirTemp("", "outbox-torture-kafka-"); err != nil {
		return nil, err
	}
	return b, b.start(kfake.SeedTopics(8, kafkaTopic))
}

func (b *kafkaBroker) start(extra ...kfake.Opt) error {
	opts := append([]kfake.Opt{kfake.NumBrokers(len(b.ports)), kfake.Ports(b.ports...), kfake.DataDir(b.dir), kfake.SyncWrites()}, extra...)
	var err error
	for range 50 {
		var c *kfake.Cluster
		if c, err = kfake.NewCluster(opts...); err == nil {
			b.mu.Lock()
			b.c = c
			b.mu.Unlock()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func (b *kafkaBroker) brokers() []string {
	var out []string
	for _, p := range b.ports {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out
}

func (b *kafkaBroker) relayArgs() []string {
	s := ""
	for i, a := range b.brokers() {
		if i > 0 {
			s += ","
		}
		s += a
	}
	return []string{"--kafka-brokers", s}
}

func (b *kafkaBroker) restart(ctx context.Context, hold time.Duration) error {
	b.mu.Lock()
	c := b.c
	b.c = nil
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
	sleep(ctx, hold)
	return b.start()
}

func (b *kafkaBroker) end(ctx context.Context) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers()...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafkaTopic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var first error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && first == nil {
			first = o.Err
		}
		out[o.Partition] = o.Offset
	})
	return out, first
}

func (b *kafkaBroker) close() {
	b.mu.Lock()
	c := b.c
	b.c = nil
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
	_ = os.RemoveAll(b.dir)
}

// copy consumes every partition from the start, in offset order per partition, and posts each
// record; the client rides through broker restarts on its own.
func (b *kafkaBroker) copy(ctx context.Context, bg *bridge) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers()...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			h := http.Header{}
			for _, kv := range r.Headers {
				h.Add(kv.Key, string(kv.Value))
			}
			if err := bg.post(ctx, h, r.Value); err == nil {
				bg.advance(r.Partition, r.Offset)
			}
		})
	}
}

// brokerArgs replaces the webhook flags of args with the broker's.
func brokerArgs(args, broker []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--webhook-url", "--webhook-secret":
			i++ // and its value
			continue
		}
		out = append(out, args[i])
	}
	return append(out, broker...)
}
