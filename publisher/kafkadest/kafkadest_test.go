package kafkadest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/publisher"
)

func TestTopicTemplate(t *testing.T) {
	tm, err := parseTemplate(DefaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tm.expand(&cdc.Event{AggregateType: "Order Line/ü"}), "outbox.event.Order_Line___"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
	if got, want := tm.expand(&cdc.Event{}), "outbox.event._"; got != want {
		t.Errorf("expand of an empty type = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "a b", "a/{event_type}", "x.{nope}", "x.{event_type"} {
		if _, err := parseTemplate(bad); err == nil || !strings.Contains(err.Error(), "placeholders are") {
			t.Errorf("template %q: err %v, want an error naming the placeholders", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "kafka.brokers"},
		{Config{Brokers: "kafka://a:9092"}, "without a scheme"},
		{Config{Brokers: "a:1", Compression: "brotli"}, "zstd"},
		{Config{Brokers: "a:1", SASL: SASLConfig{Mechanism: "gssapi"}}, "scram-sha-256"},
		{Config{Brokers: "a:1", SASL: SASLConfig{Mechanism: "plain", User: "u"}}, "password"},
		{Config{Brokers: "a:1", TLS: TLSConfig{Key: "k"}}, "tls.cert"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{Brokers: "a:1, b:2", Compression: "zstd"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func event(agg string, n int) *cdc.Event {
	tx := &cdc.Tx{CommitLSN: pglogrepl.LSN(1000 + n), CommitTime: time.Now()}
	ev := &cdc.Event{ID: fmt.Sprintf("%s-%04d", agg, n), AggregateType: "order", AggregateID: agg,
		EventType: "order.created", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)),
		Headers: []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`), Tx: tx}
	tx.Events = []*cdc.Event{ev}
	return ev
}

// One record: the outbox event router's topic, key and id header, the payload as value, and
// the webhook contract's headers.
func TestSendRecord(t *testing.T) {
	ctx := testCtx(t)
	kc := kafkatest.Start(t, 1, 3, "outbox.event.order")
	d, err := New(ctx, Config{Brokers: kc.Brokers()}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ev := event("o-1", 1)
	if r := d.Send(ctx, ev, 1); !r.Delivered || r.Label != publisher.ResultSuccess {
		t.Fatalf("send: %+v", r)
	}
	recs := kafkatest.ReadTopic(ctx, t, kc.Brokers(), "outbox.event.order")
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if string(r.Key) != "o-1" || string(r.Value) != `{"n":1}` {
		t.Errorf("key %q value %q", r.Key, r.Value)
	}
	for k, want := range map[string]string{"id": ev.ID, "X-Event-Id": ev.ID, "X-Event-Type": "order.created",
		"X-Aggregate-Type": "order", "X-Aggregate-Id": "o-1", "X-Event-Sequence": publisher.Sequence(ev),
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if got := r.Headers[k]; got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	// A topic that does not exist is a failed attempt, labelled as a broker's refusal.
	missing := &cdc.Event{ID: "x", AggregateType: "nope", AggregateID: "1", Payload: []byte(`{}`), Tx: ev.Tx}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if r := d.Send(sctx, missing, 1); r.Delivered {
		t.Fatalf("send to a missing topic delivered: %+v", r)
	}
}

// counting counts the failed attempts of a destination.
type counting struct {
	*Destination
	failed atomic.Int64
}

func (c *counting) Send(ctx context.Context, ev *cdc.Event, attempt int) publisher.Result {
	r := c.Destination.Send(ctx, ev, attempt)
	if !r.Delivered {
		c.failed.Add(1)
	}
	return r
}

type acks struct {
	mu  sync.Mutex
	ids []string
}

func (a *acks) Ack(ev *cdc.Event)          { a.mu.Lock(); a.ids = append(a.ids, ev.ID); a.mu.Unlock() }
func (a *acks) Grow(*cdc.Tx, []*cdc.Event) {}
func (a *acks) n() int                     { a.mu.Lock(); defer a.mu.Unlock(); return len(a.ids) }

// The publisher through this destination while the cluster restarts twice: every event in the
// topic, each aggregate's first appearances in commit order, every acknowledged event stored.
func TestOrderAcrossRetriesAndClusterRestart(t *testing.T) {
	ctx := testCtx(t)
	kc := kafkatest.Start(t, 3, 4, "outbox.event.order")
	d, err := New(ctx, Config{Brokers: kc.Brokers(), RequestTimeout: time.Second}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := &acks{}
	cd := &counting{Destination: d}
	pub := publisher.New(publisher.Config{MaxInFlight: 16, RetryMin: 20 * time.Millisecond,
		RetryMax: 200 * time.Millisecond}, cd, a, nil)
	const aggs, per = 20, 50
	txs := make(chan *cdc.Tx)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(runCtx, txs) }()
	// The broker goes down twice while events keep coming, each time for longer than an attempt
	// may take, and comes back on the same store.
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		for _, at := range []int{aggs * per / 4, aggs * per / 2} {
			for a.n() < at && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			kc.Close()
			time.Sleep(1500 * time.Millisecond)
			kc.Restart()
		}
	}()
	total := 0
	for n := 0; n < per; n++ {
		for g := 0; g < aggs; g++ {
			txs <- event(fmt.Sprintf("agg-%02d", g), n).Tx
			total++
		}
	}
	<-faults
	for a.n() < total {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d events acknowledged", a.n(), total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	if cd.failed.Load() == 0 {
		t.Fatal("no attempt failed: the restarts were not noticed, so this test tested no retry")
	}
	recs := kafkatest.ReadTopic(ctx, t, kc.Brokers(), "outbox.event.order")
	seen := map[string]bool{}
	next := map[string]int{}
	for _, r := range recs {
		id := r.Headers["id"]
		if seen[id] {
			continue
		}
		seen[id] = true
		agg := string(r.Key)
		var n int
		fmt.Sscanf(strings.TrimPrefix(id, agg+"-"), "%d", &n)
		if n != next[agg] {
			t.Fatalf("aggregate %s: first appearance of event %d at %d/%d, want event %d (commit order)", agg, n, r.Partition, r.Offset, next[agg])
		}
		next[agg]++
	}
	a.mu.Lock()
	for _, id := range a.ids {
		if !seen[id] {
			t.Errorf("event %s acknowledged but not in the topic", id)
		}
	}
	a.mu.Unlock()
	if len(seen) != total {
		t.Fatalf("%d distinct events in the topic, want %d", len(seen), total)
	}
	t.Logf("%d failed attempts; %d records stored for %d events", cd.failed.Load(), len(recs), total)
}
