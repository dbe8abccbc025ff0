package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// config sizes one run. parseConfig fills it from the environment; tests build it directly.
type config struct {
	// Events is how many committed events the writers aim for (TORTURE_EVENTS).
	Events int
	// Duration caps the load phase (TORTURE_DURATION). Writers are paced to reach Events at
	// about Duration, so both limits matter; faults slow them down, and then Duration ends it.
	Duration time.Duration
	// Seed drives the workload and the fault schedule (TORTURE_SEED).
	Seed uint64
	// Writers is the number of concurrent writers (TORTURE_WRITERS).
	Writers int
	// Aggregates are spread over the writers; MaxTxSize bounds the events per transaction
	// (uniform from 1); Rollback is the share of transactions rolled back.
	Aggregates int
	MaxTxSize  int
	Rollback   float64
	// GapMin and GapMax bound the pause between two faults (TORTURE_FAULT_GAP).
	GapMin, GapMax time.Duration
	// Drain is how long the end of the run waits for the last deliveries (TORTURE_DRAIN).
	Drain time.Duration
	// Pipelines is 1 (the default: the relay's flags) or 2 (TORTURE_PIPELINES: a --config with a
	// second, filtered pipeline, checked too).
	Pipelines int
	// Relay, if set, is the relay binary to run instead of building one (TORTURE_RELAY).
	Relay string
	// KeepLogs keeps the relays' and the server's logs even when the run passes
	// (TORTURE_KEEP_LOGS); a failed run always keeps them.
	KeepLogs bool
	// Sink, if set, is the broker the relays deliver to instead of the webhook: nats or kafka
	// (TORTURE_SINK; make torture SINK=...; broker.go).
	Sink string
	// Batch, if above 1, has the relays send up to that many events per request, as CloudEvents
	// batches (or that many messages at once to a broker): --batch-max-events; TORTURE_BATCH.
	Batch int
	// Endpoints runs the relays with --endpoints (TORTURE_ENDPOINTS=1; endpoints.go): the events
	// carry tenants and several aggregate and event types, EndpointCount endpoints over Tenants
	// tenants are rows of outbox_endpoints that an endpoint manager adds, updates, pauses,
	// resumes, disables, enables and removes during the load, and the checks are per (event,
	// endpoint) pair.
	Endpoints     bool
	EndpointCount int
	Tenants       int
	// ChangeMin and ChangeMax bound the pause between two endpoint changes.
	ChangeMin, ChangeMax time.Duration
	// SpillAfter is the relays' --spill-after in an endpoints run (TORTURE_SPILL_AFTER; 1s):
	// short, so that the endpoint blackouts (receiver.go) make endpoints spill to their
	// backlog, drain it and rejoin the live stream many times per run.
	SpillAfter time.Duration
}

func defaultConfig() config {
	return config{Events: 20_000, Duration: 60 * time.Second, Writers: 4, Aggregates: 200, MaxTxSize: 20,
		Rollback: 0.05, GapMin: time.Second, GapMax: 4 * time.Second, Drain: 3 * time.Minute,
		EndpointCount: 50, Tenants: 20, ChangeMin: 100 * time.Millisecond, ChangeMax: 500 * time.Millisecond,
		SpillAfter: time.Second}
}

// parseConfig reads the TORTURE_* variables through getenv, rejecting bad values with an
// error that says what to set.
func parseConfig(getenv func(string) string) (config, error) {
	cfg := defaultConfig()
	if v := getenv("TORTURE_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			return cfg, fmt.Errorf("TORTURE_EVENTS=%q: set a whole number of events, at least 10 (default 20000)", v)
		}
		cfg.Events = n
	}
	if v := getenv("TORTURE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return cfg, fmt.Errorf("TORTURE_DURATION=%q: set a duration of at least 1s, e.g. 60s", v)
		}
		cfg.Duration = d
	}
	if v := getenv("TORTURE_WRITERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return cfg, fmt.Errorf("TORTURE_WRITERS=%q: set 1 to 64 (default 4)", v)
		}
		cfg.Writers = n
	}
	if v := getenv("TORTURE_FAULT_GAP"); v != "" {
		lo, hi, err := parseRange(v)
		if err != nil {
			return cfg, fmt.Errorf("TORTURE_FAULT_GAP=%q: %v; set min-max, e.g. 1s-4s", v, err)
		}
		cfg.GapMin, cfg.GapMax = lo, hi
	}
	if v := getenv("TORTURE_DRAIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return cfg, fmt.Errorf("TORTURE_DRAIN=%q: set a duration of at least 1s, e.g. 3m", v)
		}
		cfg.Drain = d
	}
	cfg.Relay = getenv("TORTURE_RELAY")
	switch cfg.Sink = getenv("TORTURE_SINK"); cfg.Sink {
	case "", "webhook":
		cfg.Sink = ""
	case "nats", "kafka":
	default:
		return cfg, fmt.Errorf("TORTURE_SINK=%q: set nats or kafka, or leave it empty for the webhook", cfg.Sink)
	}
	if v := getenv("TORTURE_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("TORTURE_BATCH=%q: set the messages per batch, e.g. 100 (1: none)", v)
		}
		cfg.Batch = n
	}
	cfg.Pipelines = 1
	if v := getenv("TORTURE_PIPELINES"); v != "" {
		if v != "1" && v != "2" {
			return cfg, fmt.Errorf("TORTURE_PIPELINES=%q: set 1 (the default) or 2", v)
		}
		cfg.Pipelines = int(v[0] - '0')
	}
	if cfg.Pipelines == 2 && cfg.Batch > 1 {
		return cfg, errors.New("TORTURE_BATCH with TORTURE_PIPELINES=2: the two-pipeline run takes its settings from its own config file; run them apart")
	}
	if v := getenv("TORTURE_ENDPOINTS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("TORTURE_ENDPOINTS=%q: set 1 (a run with --endpoints) or 0", v)
		}
		cfg.Endpoints = b
	}
	if cfg.Endpoints && (cfg.Sink != "" || cfg.Pipelines == 2 || cfg.Batch > 1) {
		return cfg, errors.New("TORTURE_ENDPOINTS=1 with TORTURE_SINK, TORTURE_PIPELINES=2 or TORTURE_BATCH: " +
			"the endpoints run delivers to its own endpoints' webhooks; run them apart")
	}
	if v := getenv("TORTURE_SPILL_AFTER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond {
			return cfg, fmt.Errorf("TORTURE_SPILL_AFTER=%q: set the endpoints run's --spill-after, at least 100ms, e.g. 1s", v)
		}
		cfg.SpillAfter = d
	}
	if v := getenv("TORTURE_KEEP_LOGS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("TORTURE_KEEP_LOGS=%q: set 1 or 0", v)
		}
		cfg.KeepLogs = b
	}
	if v := getenv("TORTURE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("TORTURE_SEED=%q: set the unsigned number a previous run printed", v)
		}
		cfg.Seed = n
	} else {
		cfg.Seed = randomSeed()
	}
	return cfg, nil
}

// parseRange reads "min-max" durations, such as "1s-4s"; one duration means min = max.
func parseRange(v string) (time.Duration, time.Duration, error) {
	lo, hi, found := strings.Cut(v, "-")
	a, err := time.ParseDuration(strings.TrimSpace(lo))
	if err != nil {
		return 0, 0, err
	}
	b := a
	if found {
		if b, err = time.ParseDuration(strings.TrimSpace(hi)); err != nil {
			return 0, 0, err
		}
	}
	if a < 100*time.Millisecond || b < a {
		return 0, 0, fmt.Errorf("need 100ms <= min <= max")
	}
	return a, b, nil
}

// randomSeed is a fresh seed, kept below 2^53 so that it survives any tool that reads numbers
// as floats on its way back into TORTURE_SEED.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 11
}
