// Package publisher is the delivery engine: it orders, batches, retries and parks outbox
// events on their way to their destinations, spills a destination that is down to a backlog off
// the WAL, and carries out pauses, replays and endpoint changes. What goes over the wire is a
// destination's business (package destination: webhook, natsdest, kafkadest, or a program's
// own); what is stored, a store's (package store: pgstore in PostgreSQL, memstore in memory).
//
// # Design
//
// One engine serves both kinds of pipeline. A pipeline with one destination (New) is one static
// lane; a pipeline of partner endpoints (NewFanout) has a lane per endpoint and routes each
// event to the lanes subscribed to it. Everything per destination lives in its lane once
// (lane.go): the keyed queues, the batch former, the in-flight cap, the rate limit, the circuit
// breaker (internal/health), the pause, the parked aggregates and the backlog. There is one
// attempt flow (engine.go: dispatch, finished), one settle path (settle), one worker pool.
//
// The engine's decisions are made by a deterministic core (engine) that does no I/O and starts
// no goroutines: its inputs are method calls (a transaction arrived, an attempt finished, a store
// operation returned, the clock reached a timer, the operator paused), its outputs effects
// (start this attempt, run this store operation) and plain calls that do not block (the tracker's
// Ack, Marks.Done, metrics). In production a driver owns it (driver.go: a mutex, workers that make
// the attempts, goroutines that run the store operations, a timer); in the simulation
// (sim_test.go) a seeded event queue with a fake clock does, running attempts and operations in
// random orders with random faults: any run replays exactly from its seed (make simulate).
//
// The stream's transactions go through the intake (intake.go) strictly in commit order: each
// event is routed and queued, each control record (an endpoint change, a replay request) is
// carried out at its place, waiting for the store operations it needs. Metrics and the delivery
// log are decorators around each lane's destination (decorate.go), not branches of the attempt
// flow.
//
// # Guarantees, and where each is enforced
//
// Order per aggregate, per destination. Events are queued by key, (aggregate_type,
// aggregate_id), in the order the intake takes them (lane.add). Only a key's head is ready
// (lane.enqueue, lane.pushReady); it stays the head until it is delivered or parked (lane.done,
// lane.park), so the next event of the aggregate waits while other aggregates go concurrently up
// to the lane's cap (lane.take). A batch holds a prefix of each of its keys (lane.gather); a
// failing batch is split in halves, and the second half of one key waits for the first
// (batch.split, batch.after). What is parked of an aggregate is the start of its events, as a
// replay delivers it ahead of the rest: a lane writes its parks one at a time, in order
// (writeParks). The backlog is read in stream order into the same queues, nothing is written to
// it past an attempt still under way (backlogStep: live) unless with that attempt's events
// (storeInFlight), and a lane rejoins the stream only once it read everything written (rejoin).
//
// Isolation before a spill: a lane holds at most its fair share of the tracker's buffer, the
// buffer divided among the lanes holding events (fair.go: keepShares, fairSpill); one that would
// hold more spills at once, so one endpoint that hangs cannot stop the stream for the others.
//
// No loss: an event settles (engine.settle, the only call of the tracker's Ack for an event) only
// once it is delivered (delivered), durably written to the lane's backlog (writeSpilled) or as a
// dead letter or a park (deadLetter, parkNow), recorded as abandoned (a shadow's give-up, an
// endpoint's removal: abandon, retire, release; a disable keeps what it held in the backlog), or
// settled by another relay while this one was cut off from the slot (dropConfirmed). The slot
// confirms only what the tracker pops, so it never passes an event that is none of these; what a
// stopped relay held is sent again by the next.
//
// Nothing outside its subscription: an endpoint change takes effect at its transaction's commit,
// for every event of that transaction (the intake carries out a transaction's endpoint changes
// before its first event: controlsInOrder), once recorded in the versions log
// (endpointState.change), and a relay that starts or leads again brings the endpoints to what
// the log says they were at its place (resync, applyPending).
//
// Nothing stranded: every wait has an end that comes without the stream (a timer, a store
// operation, a delivery), a lane that holds events is woken by its own timers (lane.wakeLater),
// and a new streaming session is followed even when no transaction comes (followSession).
//
// Failover: a relay delivers, spills and records endpoint changes only while its stream holds
// the slot in the session it caught up with (delivering, leading). When it holds the slot again
// after another relay led, it first drops what the slot confirmed meanwhile (dropConfirmed), then
// brings its endpoints, backlogs and parked aggregates up to date (begin, resyncBacklogs,
// resyncParked). The simulation checks every one of these guarantees on every run
// (sim_check_test.go); docs/development/engine.md tells the design at length.
//
// # Retries, the breaker, pause and replays
//
// A failed attempt is retried after an exponential, jittered delay from RetryMin up to RetryMax
// (or the destination's Result.RetryAfter, up to RetryMax); a waiting retry holds no worker.
// After MaxAttempts a lone event is dead-lettered and its aggregate parked until a replay. After
// 10 failures in a row a lane's breaker opens and probes with one attempt at a time. Pause holds
// every head back unacknowledged, so the buffer fills and the slot keeps its position; a 410 Gone
// pauses the pipeline (or disables the endpoint), recorded durably. A replay request arrives in
// the stream as a logical message at its place in commit order (cdc.Control): parked aggregates
// are re-queued there; a replay since a time is read page by page ahead of everything later,
// or, to an endpoint, written into its backlog there (sincebacklog.go) while the other
// endpoints take the stream.
//
// # Metrics and lifetime
//
// A Publisher registers its series on Config.Registerer (nil: nowhere). Run owns everything it
// starts (its workers, store runners and timer) and waits for all of them before it returns.
package publisher
