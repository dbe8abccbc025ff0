// Command outbox-torture runs the real relay binary against a throwaway PostgreSQL while
// writers commit outbox transactions and faults are injected on a seeded random schedule, then
// checks every delivery guarantee and prints a Markdown summary (`make torture`).
//
// # What runs
//
//   - PostgreSQL: a pgtest cluster with two databases, the producer's (outbox_events, the slot)
//     and the consumer's (inbox_events and an `applied` table).
//   - Writers: TORTURE_WRITERS connections commit transactions of 1–20 events over 200
//     aggregates, rolling back about 5%. Aggregates are partitioned across writers, so an
//     aggregate's commit order is its writer's order; each payload is {"seq": n}, n counting
//     that aggregate's committed events from 1. Writers survive server restarts: a
//     transaction cut off before COMMIT is retried with new ids, and one cut off during COMMIT
//     (outcome unknown) is settled by looking its ids up after reconnecting.
//   - Relays: `outbox-relay run`, built from this module into a temp dir (or TORTURE_RELAY),
//     with --request-timeout 1s, --replication-timeout 2s and unlimited attempts, connected to
//     PostgreSQL through a freeze proxy; one leader, at times a standby.
//   - Receiver: an in-process HTTP server that verifies each signature, records every
//     accepted delivery, and hands it to an inbox.Handler whose process function counts the
//     event in applied(event_id, n).
//
// # Faults
//
// From TORTURE_SEED (printed at start; random if unset), the schedule picks faults every
// TORTURE_FAULT_GAP (a range, 1s–4s by default), each kind at least once before any repeats:
//
//	relay-kill       SIGKILL the streaming relay, start another at once
//	failover         start a standby on the same slot, SIGKILL the leader, time the takeover,
//	                 leave a new standby running
//	pg-restart       immediate (crash) restart of PostgreSQL on the same port
//	partition        freeze every relay connection to PostgreSQL (the relays connect through
//	                 an in-process TCP proxy that stops forwarding and closes nothing) for 2–3
//	                 replication timeouts; the leader must stop answering ready meanwhile, and
//	                 a relay must stream again after the thaw
//	recv-500         answer 500 to a share of requests for a while
//	recv-hang        hold a share of requests past the relay's request timeout
//	recv-reset       reset a share of connections without an answer
//	recv-drop-ack    apply the event in the inbox, then reset instead of answering
//	recv-slow        answer after 50–200 ms
//
// The schedule is reproducible; the interleaving with the processes' timing is not.
//
// # Invariants
//
// After the load ends (TORTURE_EVENTS committed or TORTURE_DURATION passed) and every
// committed event has been delivered (or the drain timeout passes):
//
//   - lost: every committed event was delivered;
//   - phantoms: nothing else was, in particular nothing of a rolled-back transaction;
//   - order: per aggregate, first deliveries follow commit order without gaps;
//   - inbox: every committed event applied exactly once, and inbox_events holds exactly them;
//   - confirm: the slot's confirmed_flush_lsn, sampled every 100 ms, never passed a
//     transaction before all its events were delivered (see confirm.go for why the check is
//     sound), cross-checked with the commit LSN each delivery carries in X-Event-Sequence;
//   - takeover: a standby took the slot over after each failover, and the slot caught up at
//     the end.
//
// Duplicates are allowed (at-least-once) and reported as a rate. The exit code is 1 when any
// invariant fails, and the relays' and the server's logs are then kept on disk for analysis.
//
// # Environment
//
//	TORTURE_EVENTS      committed events to write (default 20000)
//	TORTURE_DURATION    longest load phase (default 60s); the run ends at whichever comes first
//	TORTURE_SEED        seed of the workload and the fault schedule (default: random, printed)
//	TORTURE_WRITERS     concurrent writers (default 4)
//	TORTURE_FAULT_GAP   pause between faults, "min-max" (default 1s-4s)
//	TORTURE_DRAIN       how long to wait for the last deliveries (default 3m)
//	TORTURE_RELAY       a relay binary to run instead of building ./cmd/outbox-relay
//	TORTURE_KEEP_LOGS   1 to keep the relays' and the server's logs of a passing run too
//	TORTURE_ENDPOINTS   1 to run the relays with --endpoints over 50 endpoints that change during
//	                    the load, checked per (event, endpoint) pair (endpoints.go, epcheck.go)
//	TORTURE_SPILL_AFTER the endpoints run's --spill-after (default 1s): endpoints blacked out for
//	                    2–5s at a time spill to their backlog, drain it and rejoin the stream
//
// Progress goes to stderr, the summary to stdout.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Stdout, os.Stderr))
}

func run(stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := parseConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-torture: %v\n", err)
		return 2
	}
	res, err := torture(ctx, cfg, stderr)
	if res != nil {
		writeSummary(stdout, res)
	}
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "outbox-torture: interrupted; everything it started is stopped and removed")
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "outbox-torture: %v\n", err)
		return 1
	case !res.OK():
		fmt.Fprintf(stderr, "outbox-torture: invariants FAILED (seed %d); logs kept in %s\n", res.Seed, res.LogDir)
		return 1
	}
	return 0
}
