package relay

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// An endpoint that spills while an attempt is under way writes nothing to its backlog before
// that attempt settles: the event comes before those spilled after it, and a relay that dies
// with the attempt unsettled must not leave a backlog whose entries skip it. The next leader
// reads the backlog at once, while its stream sends the event again only later; it would
// deliver the later events first and then write the earlier one behind what it read. An
// endpoints torture run found exactly that after a failover (seed 3724974251207849: order and
// confirm violations). Here the relay process is SIGKILLed with the attempt hanging; the next
// relay then delivers both events, in order.
func TestSpillWritesNothingPastAnAttemptUnderWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	hung := newPartner(t, "hung", func(string, string, string) bool { return true })
	e.addPartner(hung, endpoints.Endpoint{})
	var hang atomic.Bool
	hang.Store(true)
	release := make(chan struct{})
	t.Cleanup(func() { // before the receiver's Close (cleanups run last first)
		select {
		case <-release:
		default:
			close(release)
		}
	})
	hung.recv.SetFail(func(*http.Request) int {
		if hang.Load() {
			<-release
			return http.StatusServiceUnavailable // the relay that sent it is gone
		}
		return 0
	})

	var logs relaytest.SyncBuffer
	cmd := e.startEndpointsProcess(io.MultiWriter(testWriter{t}, &logs), "--request-timeout", "1m", "--spill-after", "300ms")
	e.waitSlot()
	e.write("a", tenantEvents{"", "order", "order.created", 1, 1}, []*partner{hung}) // e1: its attempt hangs
	waitFor(t, 30*time.Second, "the endpoint spilled with e1's attempt under way", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "endpoint spills to its backlog") && strings.Contains(line, `"in_flight":1`) {
				return true
			}
		}
		return false
	})
	id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: "a-0", EventType: "order.created",
		Payload: map[string]int{"seq": 2}}) // e2: spilled
	if err != nil {
		t.Fatal(err)
	}
	hung.want.Committed = append(hung.want.Committed, relaytest.Committed{ID: id.String(), Aggregate: "order/a-0", Seq: 2})
	time.Sleep(time.Second) // twenty turns of the backlog loop
	if n := e.backlogCount(hung.id); n != 0 {
		t.Fatalf("the backlog holds %d entries while e1's attempt is under way: e2 was written past it", n)
	}

	if err := cmd.Process.Kill(); err != nil { // e1's attempt never settles
		t.Fatal(err)
	}
	_ = cmd.Wait()
	hang.Store(false)
	close(release)
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter = 300 * time.Millisecond })
	defer func() { _ = r.stop(t) }()
	waitPartners(t, hung) // e1, then e2
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(hung.id) == 0 })
}
