package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// faultKind is one kind of injected fault.
type faultKind int

const (
	faultRelayKill faultKind = iota
	faultFailover
	faultPGRestart
	faultPartition
	faultSlotDrop
	faultPause
	faultReplaySince
	faultRecv500
	faultRecvHang
	faultRecvReset
	faultRecvDropAck
	faultRecvSlow
	faultKinds
)

var faultNames = [faultKinds]string{"relay-kill", "failover", "pg-restart", "partition", "slot-drop", "pause", "replay-since", "recv-500", "recv-hang",
	"recv-reset", "recv-drop-ack", "recv-slow"}

func (k faultKind) String() string { return faultNames[k] }

// receiverMode is the receiver's treatment for a receiver fault, modeNormal for the others.
func (k faultKind) receiverMode() mode {
	switch k {
	case faultRecv500:
		return mode500
	case faultRecvHang:
		return modeHang
	case faultRecvReset:
		return modeReset
	case faultRecvDropAck:
		return modeDropAck
	case faultRecvSlow:
		return modeSlow
	}
	return modeNormal
}

// fault is one planned injection.
type fault struct {
	Gap  time.Duration // pause before it
	Kind faultKind
	// For receiver faults: how long the episode lasts and the share of requests it hits. For a
	// failover: Hold is how long the standby runs beside the leader before the leader dies. For
	// a partition: how long the relays' connections stay frozen.
	Hold  time.Duration
	Share float64
}

func (f fault) String() string {
	switch {
	case f.Kind.receiverMode() != modeNormal:
		return fmt.Sprintf("%s for %s on %.0f%% of requests", f.Kind, f.Hold.Round(time.Millisecond), 100*f.Share)
	case f.Kind == faultFailover:
		return fmt.Sprintf("%s after %s beside a standby", f.Kind, f.Hold.Round(time.Millisecond))
	case f.Kind == faultPartition || f.Kind == faultPause:
		return fmt.Sprintf("%s for %s", f.Kind, f.Hold.Round(time.Millisecond))
	case f.Kind == faultReplaySince:
		return fmt.Sprintf("%s %s ago", f.Kind, f.Hold.Round(time.Millisecond))
	}
	return f.Kind.String()
}

// plan is the fault schedule: a pure function of the seed, so a failing run's schedule can be
// replayed with TORTURE_SEED. The first faults are every kind once, in a shuffled order; after
// that kinds are drawn at random, receiver faults as often as process faults.
type plan struct {
	rng            *rand.Rand
	gapMin, gapMax time.Duration
	first          []faultKind
	skip           map[faultKind]bool // kinds this run leaves out (withoutKinds)
}

func newPlan(seed uint64, gapMin, gapMax time.Duration) *plan {
	// A stream of its own (the second word), apart from the writers', so that changing the
	// writer count keeps the schedule.
	rng := rand.New(rand.NewPCG(seed, 0xfa))
	first := make([]faultKind, faultKinds)
	for i := range first {
		first[i] = faultKind(i)
	}
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	return &plan{rng: rng, gapMin: gapMin, gapMax: gapMax, first: first}
}

// withoutKinds leaves the given kinds out of the plan: they are dropped from the first round,
// and drawn again when a later draw meets them.
func (p *plan) withoutKinds(kinds ...faultKind) *plan {
	p.skip = map[faultKind]bool{}
	for _, k := range kinds {
		p.skip[k] = true
	}
	var first []faultKind
	for _, k := range p.first {
		if !p.skip[k] {
			first = append(first, k)
		}
	}
	p.first = first
	return p
}

// endpointsSkip are the kinds an endpoints run leaves out: a replay since a time re-sends
// events to the endpoints as they are now, outside the routing at commit that the checks hold
// the relay to, and a dropped slot's backfill is routed by versions the contract does not pin
// down (both would need rules of their own in epcheck.go).
var endpointsSkip = []faultKind{faultSlotDrop, faultReplaySince}

func (p *plan) next() fault {
	f := fault{Gap: p.between(p.gapMin, p.gapMax)}
	f.Kind = p.kind()
	for p.skip[f.Kind] {
		f.Kind = p.kind()
	}
	switch {
	case f.Kind.receiverMode() != modeNormal:
		f.Hold = p.between(500*time.Millisecond, 3*time.Second)
		f.Share = 0.3 + 0.7*p.rng.Float64()
	case f.Kind == faultFailover:
		f.Hold = p.between(300*time.Millisecond, 2*time.Second)
	case f.Kind == faultPartition:
		// Long enough for the relay to find the connection dead, with room on a loaded machine.
		f.Hold = p.between(2*relayReplicationTimeout, 3*relayReplicationTimeout)
	case f.Kind == faultPause:
		f.Hold = p.between(500*time.Millisecond, 2*time.Second)
	case f.Kind == faultReplaySince:
		f.Hold = p.between(3*time.Second, 10*time.Second) // how far back the replay starts
	}
	return f
}

func (p *plan) kind() faultKind {
	var k faultKind
	if len(p.first) > 0 {
		k, p.first = p.first[0], p.first[1:]
	} else if p.rng.IntN(2) == 0 {
		k = faultKind(p.rng.IntN(int(faultRecv500))) // a process or network fault
	} else {
		k = faultRecv500 + faultKind(p.rng.IntN(int(faultKinds-faultRecv500)))
	}
	return k
}

func (p *plan) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)))
}

// takeoverLimit is how long a relay may take to stream again after the leader dies. A standby
// retries every 2s, so this leaves plenty.
const takeoverLimit = 30 * time.Second

// faultStats is what the injections did.
type faultStats struct {
	Counts    [faultKinds]int
	Takeovers []time.Duration // leader killed → another streams, per failover
	Recovery  []time.Duration // leader killed → a relay streams again, per relay-kill
	Noticed   []time.Duration // connections frozen → the leader no longer ready, per partition
	Healed    []time.Duration // thaw → a relay streams again, per partition
	SlotDrops []time.Duration // new relay started → it streams on a new slot, per slot-drop
	PGDown    []time.Duration // restart call, kill to ready
	Replays   []int64         // events re-sent, per replay-since
	Failures  []string        // a fault that did not heal
	Log       []injected      // every fault, in order
	// Blocked are the spans in which the relays could not write to PostgreSQL (a pg-restart, a
	// partition): their done-marks wait, retried with backoff, and a kill then drops them.
	Blocked []span
}

// injected is one fault as it happened.
type injected struct {
	At   time.Time
	Kind faultKind
	What string
}

// inject runs one fault. Process faults finish before it returns; a receiver fault only starts.
func (t *harness) inject(ctx context.Context, f fault) {
	t.faults.Counts[f.Kind]++
	t.faults.Log = append(t.faults.Log, injected{At: time.Now(), Kind: f.Kind, What: f.String()})
	switch f.Kind {
	case faultRelayKill:
		t.relayKill(ctx)
	case faultFailover:
		t.failover(ctx, f.Hold)
	case faultPGRestart:
		start := time.Now()
		if err := t.cluster.Restart(ctx); err != nil {
			t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("pg-restart: %v", err))
			return
		}
		t.faults.PGDown = append(t.faults.PGDown, time.Since(start))
		t.faults.Blocked = append(t.faults.Blocked, span{What: "pg-restart", From: start, To: time.Now()})
	case faultPartition:
		t.partition(ctx, f.Hold)
	case faultSlotDrop:
		t.slotDrop(ctx)
	case faultPause:
		t.pause(ctx, f.Hold)
	case faultReplaySince:
		t.replaySince(ctx, f.Hold)
	default:
		if t.broker != nil {
			// A broker run: the receiver sits behind the bridge, so the broker fails instead.
			t.faults.Log[len(t.faults.Log)-1].What += fmt.Sprintf(" → broker restart, down %s", f.Hold)
			t.brokerRestart(ctx, f.Hold)
			return
		}
		t.recv.fault(f.Kind.receiverMode(), f.Share, f.Hold)
	}
}

// relayKill SIGKILLs the streaming relay (the oldest one if none streams right now) and starts
// another at once.
func (t *harness) relayKill(ctx context.Context) {
	victim := t.fleet.leader(ctx)
	if victim == nil {
		if alive := t.fleet.alive(); len(alive) > 0 {
			victim = alive[0]
		}
	}
	if victim != nil {
		t.fleet.kill(victim)
	}
	start := time.Now()
	if _, err := t.fleet.start(); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("relay-kill: restart: %v", err))
		return
	}
	if _, err := t.fleet.waitLeader(ctx, takeoverLimit); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("relay-kill: %v", err))
		return
	}
	t.faults.Recovery = append(t.faults.Recovery, time.Since(start))
}

// failover runs a standby beside the leader for hold, SIGKILLs the leader, waits for the
// standby to take the slot over, and starts a new standby.
func (t *harness) failover(ctx context.Context, hold time.Duration) {
	leader, err := t.fleet.waitLeader(ctx, takeoverLimit)
	if err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("failover: before: %v", err))
		return
	}
	if len(t.fleet.alive()) < 2 {
		if _, err := t.fleet.start(); err != nil {
			t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("failover: standby: %v", err))
			return
		}
	}
	if !sleep(ctx, hold) {
		return
	}
	t.fleet.kill(leader)
	start := time.Now()
	if _, err := t.fleet.waitLeader(ctx, takeoverLimit); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("failover: the standby did not take over: %v", err))
	} else {
		t.faults.Takeovers = append(t.faults.Takeovers, time.Since(start))
	}
	if _, err := t.fleet.start(); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("failover: new standby: %v", err))
	}
}

// partition freezes every relay connection to PostgreSQL (the proxy stops forwarding and closes
// nothing, like a silent network partition) for hold, then thaws it. The leader must notice
// while frozen (its /readyz stops answering 200: it found the connection dead by its replication
// timeout), and a relay must stream again after the thaw.
func (t *harness) partition(ctx context.Context, hold time.Duration) {
	leader, err := t.fleet.waitLeader(ctx, takeoverLimit)
	if err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("partition: before: %v", err))
		return
	}
	t.proxy.Freeze()
	start := time.Now()
	noticed := time.Duration(-1)
	for time.Since(start) < hold && ctx.Err() == nil {
		if noticed < 0 && !leader.exited() && !t.fleet.streaming(ctx, leader) {
			noticed = time.Since(start)
		}
		sleep(ctx, 50*time.Millisecond)
	}
	t.proxy.Thaw()
	thawed := time.Now()
	t.faults.Blocked = append(t.faults.Blocked, span{What: "partition", From: start, To: thawed})
	if noticed < 0 {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf(
			"partition: relay-%d still answered ready after %s with its connections frozen (replication timeout %s)",
			leader.id, hold.Round(time.Millisecond), relayReplicationTimeout))
		return
	}
	t.faults.Noticed = append(t.faults.Noticed, noticed)
	if _, err := t.fleet.waitLeader(ctx, takeoverLimit); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("partition: after the thaw: %v", err))
		return
	}
	t.faults.Healed = append(t.faults.Healed, time.Since(thawed))
}

// blame attributes each duplicate delivery to the latest process fault (relay-kill, failover,
// pg-restart, slot-drop) injected before it, and returns the faults with the most, as "n after fault k
// (what)", most first. Receiver faults are left out: the receiver never answers 2xx to a
// request it faults, so only a relay that resends after a restart or a takeover acknowledges
// an event twice.
func blame(all []injected, ds []delivery, top int) []string {
	var log []injected
	num := map[int]int{} // index in log → fault number
	for i, f := range all {
		if f.Kind.receiverMode() == modeNormal {
			num[len(log)] = i + 1
			log = append(log, f)
		}
	}
	counts := make([]int, len(log)+1) // index 0: before any process fault
	seen := map[string]bool{}
	for _, d := range ds {
		if key := pairKey(d.Endpoint, d.ID); !seen[key] {
			seen[key] = true
			continue
		}
		k := sort.Search(len(log), func(i int) bool { return log[i].At.After(d.At) })
		counts[k]++
	}
	order := make([]int, len(counts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return counts[order[a]] > counts[order[b]] })
	var out []string
	for _, k := range order[:min(top, len(order))] {
		if counts[k] == 0 {
			break
		}
		if k == 0 {
			out = append(out, fmt.Sprintf("%d before any process fault", counts[k]))
			continue
		}
		out = append(out, fmt.Sprintf("%d after fault %d (%s)", counts[k], num[k-1], log[k-1].What))
	}
	return out
}
