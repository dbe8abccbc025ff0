// Command outbox-bench measures the relay against the limits of what it sits between, in one
// run on one throwaway PostgreSQL, and prints a Markdown table (`make bench`).
//
// # Rows
//
//   - Backlog drain: BENCH_EVENTS events over 1,000 aggregates, written while the relay is
//     stopped, then drained by the real `outbox-relay run` binary; events/s, its CPU-seconds
//     per 100k events, its peak RSS.
//   - HTTP ceiling: the same signed requests posted to the same receiver with no database, from
//     this process, with the relay's concurrency (64); the relay's rate over this is the ratio
//     that issue 3 targets.
//   - pg_recvlogical: the same backlog decoded from a second slot to /dev/null: the server's
//     own decode rate.
//   - Broker drains (broker.go): the same kind of backlog drained into NATS JetStream (file
//     storage, one nats-server node) and into Kafka (franz-go's kfake), each running inside this
//     process and sharing the cores; events/s until the broker holds them all, the relay's
//     CPU-seconds per 100k, and the NATS rate over the raw decode's (target 0.4). Each broker
//     also drains in batches of 100 (NATS with --marks off too).
//   - Steady latency: commit-to-receipt p50/p99/max at 1,000 and 5,000 committed events/s.
//   - Aggregate sweep: BENCH_EVENTS/5 events over 1, 10, 100 and 10,000 aggregates, showing what
//     per-aggregate ordering costs.
//   - Resources: a 3×BENCH_EVENTS backlog, for peak RSS and CPU per 100k.
//   - Shards (shards.go): the drain with the pipeline split into 1, 2 and 4 shards in one relay
//     process; each shard's walsender decodes all WAL, which the PostgreSQL column shows.
//   - Endpoints (endpoints.go): the drain with `outbox-relay run --endpoints` to 1, 10, 100 and
//     1000 rows of outbox_endpoints, the events spread over as many tenants so that each goes
//     to one endpoint, and to 10 endpoints without a tenant that each receive every event;
//     deliveries/s, the relay's CPU per 100k deliveries and peak RSS, and PostgreSQL's CPU per
//     100k events against the 1-endpoint row's (issue 24: within 15%; the relay under 200 MB
//     at 1,000 endpoints). The receiver counts each endpoint's deliveries, and the row fails
//     unless each got exactly the events routed to it.
//   - Endpoint isolation (isolation.go): 100 endpoints at BENCH_ISOLATION_RATE events/s for
//     BENCH_ISOLATION_DURATION, each its tenant's share, run twice in one session: a baseline,
//     then with one endpoint blacked out (its connections frozen by a proxy) from 10% to 90%
//     of the run, then thawed. The slot's retained WAL over the blackout (max, at its end,
//     slope over its second half), the other 99 endpoints' p99 commit-to-delivery in both runs
//     and its ratio (issue 25: at most 2), and whether the blacked-out endpoint got everything
//     in order after the thaw and how long its catch-up took.
//   - Endpoint burst isolation (burst.go): the isolation row's 100 endpoints, a steady load for
//     the steady rows' time and at its start a burst into one endpoint of 2.5 × the buffer
//     (--max-buffered-events set to BENCH_EVENTS/12.5), run twice in one session: that
//     endpoint healthy, then hung from before the first write; the others' p50/p99
//     commit-to-delivery from the first write in both runs and its ratio (issue 38: at most 2),
//     and whether the hung endpoint got everything in order once it answered again.
//   - Replay --since (since.go): `outbox-relay replay --since` of the newer half of a table of
//     10 × BENCH_EVENTS delivered rows; the request, the time to the first and to the last
//     re-sent event, the relay's peak RSS, and the table reads (sequential and index) per event.
//   - Fan-out (fanout.go, issue 40), a table of its own: N endpoints (BENCH_FANOUT_N) made with
//     plain SQL in N/F tenants of F (BENCH_FANOUT_F), every event going to the F endpoints of
//     its tenant, 1% of them failing every attempt (500) and 1% answering after 1 s, the
//     receiver telling them apart by path. Each (N, F) with F dividing N runs as a drain of a
//     backlog of BENCH_EVENTS deliveries and at a fixed rate of BENCH_FANOUT_RATE deliveries/s
//     for BENCH_STEADY; the largest runs each way again without failing or slow endpoints; an
//     HTTP ceiling to the healthy endpoints' paths is measured in the same run. Per row:
//     healthy deliveries/s (drains, over that ceiling), the healthy endpoints' commit-to-delivery
//     p50/p99/max (rate rows), relay and PostgreSQL CPU-s per 100k accepted deliveries, relay
//     peak RSS, the slot's retained WAL, and rows written per delivery by table and operation
//     with what each row is, and WAL bytes per delivery. A row fails unless every healthy and
//     slow endpoint got exactly what was routed to it and, once the relay has stopped, every
//     event routed to a failing endpoint is in its backlog or after the slot's confirmed
//     position (decoded from the slot). Issue 40's targets compare the largest case with one
//     endpoint in the same run. At full size the fan-out rows take about 3 minutes.
//
// # The API
//
// The API row (api.go) times GET /api/v1/endpoints/{id}/deliveries, pages of 100, on an
// endpoint with 10 × BENCH_EVENTS delivery-log entries (p50 and p99 of the newest page, deep
// pages and failed attempts only), and fails if the plan of a page scans a log table.
//
// # The portal
//
// The portal row (portal.go) times the operator console's pages over HTTP: every page of the
// list of 5,000 endpoints sorted by state and by undelivered, and an endpoint's page (its
// figures and newest deliveries, and deep pages) on 10 × BENCH_EVENTS delivery-log entries.
//
// # Memory
//
// `outbox-bench memory` (memory.go) is a mode of its own: N pipelines whose destination refuses
// everything, so that each holds its full --max-buffered-bytes; it prints RSS, relay CPU and GC
// cycles for each --setting (the binary's defaults, or a GOMEMLIMIT/GOGC environment), run in
// turn in one session.
//
// # Environment
//
//	BENCH_EVENTS   main backlog size (default 100000)
//	BENCH_STEADY   duration of each steady row (default 10s × BENCH_EVENTS/100000, at least 1s)
//	BENCH_DURABLE  1 to keep fsync on (default off)
//	BENCH_ISOLATION_RATE      the isolation row's events/s (default 1000)
//	BENCH_ISOLATION_DURATION  each of its two runs (default 10m; shorter is quicker and weaker:
//	                          a blackout shorter than spill_after, 30s, never spills, and the
//	                          retained WAL's slope needs a second half of several samples)
//	BENCH_ISOLATION_ARGS      extra relay flags for that row, e.g. "--spill-after 1h
//	                          --spill-size 1000000000" to see the endpoint hold the slot
//	BENCH_FANOUT_N     the fan-out rows' endpoint counts (default "1,1000,10000")
//	BENCH_FANOUT_F     their endpoints per event (default "1,10"); an N that F does not divide
//	                   is skipped for that F
//	BENCH_FANOUT_RATE  their fixed rate in deliveries/s (default 2000: 2,000 events/s at F=1,
//	                   200 at F=10)
//	BENCH_OTEL     1 to make every relay trace (--otel-endpoint) to an OTLP/HTTP receiver in
//	               this process, every span sampled (otel.go); compare a row with and without
//	BENCH_RELAY    a relay binary to measure instead of building ./cmd/outbox-relay
//	BENCH_ONLY     comma-separated parts of row names to run just those, e.g. "steady,sweep";
//	               a number matches whole ("endpoints 10" is not "Endpoints 100"); "fanout"
//	               runs the fan-out rows, "fanout backlog n=1" the one-endpoint drain alone,
//	               "fanout backlog n=10000 f=10" that drain and its run without faults
//
// Progress goes to stderr, the report to stdout. The exit code is 1 if any row failed (a
// missed target is reported, not failed).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errFailed means the report was printed but a row failed.
var errFailed = errors.New("some rows failed; see the report")

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "outbox-bench: %v\n", err)
		return 1
	}
	return 0
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "outbox-bench",
		Short:         "Benchmark the relay: backlog drain, HTTP ceiling, raw decode, latency, aggregates, resources",
		Long:          "Runs every benchmark row on a throwaway PostgreSQL and prints a Markdown table. Sizes scale with BENCH_EVENTS.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromEnv()
			if err != nil {
				return err
			}
			res, err := runSuite(cmd.Context(), cfg, stderr)
			if res != nil {
				writeReport(stdout, res)
			}
			if err != nil {
				return err
			}
			if res.Failed() {
				return errFailed
			}
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newReceiverCmd(stdout))
	root.AddCommand(newMemoryCmd(stdout, stderr))
	return root
}

// newReceiverCmd is the webhook receiver the bench starts as a process of its own.
func newReceiverCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "receiver",
		Short:  "Serve the benchmark's webhook receiver (started by the bench itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
	}
	addr := cmd.Flags().String("addr", "127.0.0.1:0", "listen address")
	secret := cmd.Flags().String("secret", "", "X-Signature secret")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *secret == "" {
			return errors.New("receiver needs --secret")
		}
		return serveReceiver(cmd.Context(), *addr, *secret, stdout)
	}
	return cmd
}

// configFromEnv reads BENCH_EVENTS, BENCH_STEADY, BENCH_DURABLE, BENCH_OTEL and the rows' own.
func configFromEnv() (config, error) {
	cfg := config{Events: 100_000}
	if v := os.Getenv("BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			return cfg, fmt.Errorf("BENCH_EVENTS=%q: set a whole number of events, at least 100 (default 100000)", v)
		}
		cfg.Events = n
	}
	if v := os.Getenv("BENCH_STEADY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond {
			return cfg, fmt.Errorf("BENCH_STEADY=%q: set a duration of at least 100ms, e.g. 10s", v)
		}
		cfg.Steady = d
	}
	if v := os.Getenv("BENCH_ONLY"); v != "" {
		cfg.Only = strings.Split(v, ",")
	}
	if v := os.Getenv("BENCH_ISOLATION_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			return cfg, fmt.Errorf("BENCH_ISOLATION_RATE=%q: set a whole number of events per second, at least 100 (default 1000)", v)
		}
		cfg.IsolationRate = n
	}
	if v := os.Getenv("BENCH_ISOLATION_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 20*time.Second {
			return cfg, fmt.Errorf("BENCH_ISOLATION_DURATION=%q: set a duration of at least 20s, e.g. 2m (default 10m)", v)
		}
		cfg.IsolationDuration = d
	}
	cfg.IsolationArgs = strings.Fields(os.Getenv("BENCH_ISOLATION_ARGS"))
	if err := fanoutFromEnv(&cfg); err != nil {
		return cfg, err
	}
	if v := os.Getenv("BENCH_OTEL"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("BENCH_OTEL=%q: set 1 (every relay traces, to an OTLP receiver in the bench) or 0", v)
		}
		cfg.OTel = b
	}
	if v := os.Getenv("BENCH_DURABLE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("BENCH_DURABLE=%q: set 1 or 0", v)
		}
		cfg.Durable = b
	}
	return cfg, nil
}

// fanoutFromEnv reads BENCH_FANOUT_N, BENCH_FANOUT_F and BENCH_FANOUT_RATE.
func fanoutFromEnv(cfg *config) error {
	var err error
	if v := os.Getenv("BENCH_FANOUT_N"); v != "" {
		if cfg.FanoutN, err = parseCounts("BENCH_FANOUT_N", v, 1, 100_000); err != nil {
			return err
		}
	}
	if v := os.Getenv("BENCH_FANOUT_F"); v != "" {
		if cfg.FanoutF, err = parseCounts("BENCH_FANOUT_F", v, 1, 1000); err != nil {
			return err
		}
	}
	if len(cfg.fanoutCases()) == 0 {
		return fmt.Errorf("BENCH_FANOUT_N=%v and BENCH_FANOUT_F=%v: no endpoint count is a multiple of a fan-out; "+
			"include 1 in BENCH_FANOUT_F, or an N that one of them divides", cfg.fanoutN(), cfg.fanoutF())
	}
	if v := os.Getenv("BENCH_FANOUT_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			return fmt.Errorf("BENCH_FANOUT_RATE=%q: set a whole number of deliveries per second, at least 10 (default 2000)", v)
		}
		cfg.FanoutRate = n
	}
	return nil
}
