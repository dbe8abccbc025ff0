package relay

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A burst into an endpoint that hangs, with another endpoint healthy, while both are owed every
// event: the hung endpoint holds at most its fair share of the buffer (400 events between the
// two endpoints holding events: 200), then spills to its backlog at once, with the events of its
// attempts hanging, so the stream keeps flowing and the healthy endpoint receives the whole
// burst. spill_after (ten minutes) and spill_size (more than the buffer) cannot be what spills
// it, and its attempts never end (a ten-minute request timeout): before the fair share, the
// buffer filled with what the hung endpoint owed and the stream stopped for both. Once the hung
// endpoint answers again it receives everything from its backlog, in order per aggregate.
func TestHungEndpointHoldsAtMostItsFairShareOfTheBuffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := newPartner(t, "healthy", func(string, string, string) bool { return true })
	hung := newPartner(t, "hung", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	e.addPartner(hung, endpoints.Endpoint{})
	hung.recv.Hang()
	t.Cleanup(hung.recv.Unhang) // (before the receiver's Close: cleanups run last first)
	var logs relaytest.SyncBuffer
	r := e.start(func(c *Config) {
		endpointsConfig(c)
		c.MaxBufferedEvents, c.SpillAfter, c.SpillSize, c.RequestTimeout = 400, 10*time.Minute, 100_000, 10*time.Minute
		c.Logger = zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	})
	defer func() { _ = r.stop(t) }()
	live := []*partner{ok, hung}
	e.write("burst", tenantEvents{"", "order", "order.created", 20, 50}, live) // 1,000 events, 2.5 buffers
	waitPartners(t, ok)
	if got := hung.recv.Unique(); got != 0 {
		t.Fatalf("the hung endpoint accepted %d events while it hung", got)
	}
	if hung.recv.Requests() == 0 {
		t.Fatal("the hung endpoint was sent no request: nothing hung (the positive control of this test)")
	}
	if !strings.Contains(logs.String(), "more than its fair share of the buffer") {
		t.Fatalf("the hung endpoint did not spill for its fair share; the log:\n%s", logs.String())
	}
	owed := e.currentLSN()
	waitFor(t, 30*time.Second, "the hung endpoint's burst in its backlog, the slot confirmed past it", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= owed && e.backlogCount(hung.id) == 1000
	})
	hung.recv.Unhang()
	waitPartners(t, ok, hung)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(hung.id) == 0 })
}
