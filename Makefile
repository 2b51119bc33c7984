# Vantage: make targets. `make` alone lists them.
.DEFAULT_GOAL := help
GO ?= go
PKGS := ./...

.PHONY: help demo test test-race test-short faults sim bench bench-go lint cover tools

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

demo: ## run the orders example on the in-memory backend
	$(GO) run ./examples/orders

test: ## run every test with the race detector (PostgreSQL suite and bench/ included)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	cd bench && $(GO) test -race -count=1 ./...

test-race: test ## alias of test

test-short: ## run the tests without the race detector
	$(GO) test -count=1 $(PKGS)

# make faults: the fault suite (internal/faults, see RELIABILITY.md) in
# full: every fault against a private PostgreSQL cluster (local initdb and
# pg_ctl) and real worker processes; exits non-zero when a check fails.
# Extra flags: make faults FAULTS_FLAGS='-faults kill,hang -runs 5 -json'
FAULTS_FLAGS ?=
faults: ## run the fault suite in full: kills, pauses, locks, cut connections, restarts, hung and poison events (RELIABILITY.md)
	$(GO) run ./internal/faults/cmd/faults $(FAULTS_FLAGS)

# make sim: the engine's simulator (internal/sim, see its package doc) on
# fresh random seeds, printed as they run: SIM_TIME of memory seeds, then
# SIM_PG_TIME of PostgreSQL seeds (VANTAGE_TEST_DATABASE_URL, or the server
# internal/pgtest finds), under the race detector; or SEEDS seeds of each;
# or SEED, replayed SIM_REPEAT times on SIM_BACKEND. A failing seed prints
# its violations, its trace and the command that replays it.
# Examples: make sim SIM_TIME=10m SIM_PG_TIME=5m; make sim SEEDS=200;
# make sim SEED=123 SIM_BACKEND=memory SIM_REPEAT=5
SIM_TIME ?= 2m
SIM_PG_TIME ?= 1m
SEEDS ?=
SEED ?=
SIM_REPEAT ?= 1
SIM_BACKEND ?= all
SIM_FLAGS ?=
SIM_TEST = $(GO) test -race -count=1 -timeout 0 -v -run '^TestSim$$' ./internal/sim
sim: ## run the simulator on fresh seeds: SIM_TIME (2m) memory, SIM_PG_TIME (1m) PostgreSQL, or SEEDS=n, or SEED=n
	@status=0; \
	if [ -n "$(SEED)" ]; then \
		$(SIM_TEST) -sim.seed=$(SEED) -sim.repeat=$(SIM_REPEAT) -sim.backend=$(SIM_BACKEND) $(SIM_FLAGS) || status=1; \
	elif [ -n "$(SEEDS)" ]; then \
		$(SIM_TEST) -sim.seeds=$(SEEDS) -sim.backend=$(SIM_BACKEND) $(SIM_FLAGS) || status=1; \
	else \
		$(SIM_TEST) -sim.backend=memory -sim.time=$(SIM_TIME) $(SIM_FLAGS) || status=1; \
		$(SIM_TEST) -sim.backend=postgres -sim.time=$(SIM_PG_TIME) $(SIM_FLAGS) || status=1; \
	fi; \
	exit $$status

# make bench: Vantage vs River vs the raw SQL pipeline on PostgreSQL
# ($$DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test), plus the
# memory catch-up, one catch-up with 5 perspectives, live latency,
# failover and the cost of an idle instance, sized to finish in minutes on
# 2 cores. The full runs of BENCHMARKS.md use the program's defaults, e.g.
#   cd bench && go run ./cmd/bench -scenario catchup -events 200000 -instances 1,2,4
# Extra flags: make bench BENCH_FLAGS='-json -profile /tmp/vantage-profile'
BENCH_FLAGS ?=
bench: ## benchmark Vantage against River and the raw SQL pipeline (bench/, see BENCHMARKS.md)
	cd bench && $(GO) run ./cmd/bench -scenario all -events 20000 -instances 1,2 -rate 1000,100 -duration 15s -stale 10s -kill-after 5s -drain-wait 60s -idle-duration 20s -timeout 5m $(BENCH_FLAGS)

# make soak: the soak scenario (bench/, see BENCHMARKS.md), apart from make
# bench: 2 instances with default options apply events appended at a
# constant 500/s for 30 minutes on a private PostgreSQL cluster (initdb and pg_ctl
# of /usr/lib/postgresql/15/bin, initdb's settings, autovacuum on,
# pg_stat_statements when installed, removed afterwards), sampled every
# minute (latency, sizes, memory, CPU, top statements); exits non-zero when
# a verdict fails.
# The rate is meant to be half the sustainable rate the ramp scenario finds.
# Extra flags: make soak SOAK_FLAGS='-rate 400 -json -pg-bin /usr/lib/postgresql/16/bin'
SOAK_FLAGS ?=
.PHONY: soak
soak: ## 30-minute soak on a private PostgreSQL cluster: latency, table sizes, memory, CPU and statement costs over time (BENCHMARKS.md)
	cd bench && $(GO) run ./cmd/bench -scenario soak $(SOAK_FLAGS)

bench-go: ## run the Go benchmarks of the hot core pieces
	$(GO) test -run '^$$' -bench . -benchmem ./core/...

# make lint: gofmt, go vet, then golangci-lint with .golangci.yml (staticcheck,
# errcheck and the depguard rules that hold the layering: ports import nothing
# of ours, core no driver, fx or adapter, adapters neither each other nor core).
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
lint: ## gofmt, go vet and golangci-lint (staticcheck, errcheck, import layering)
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet $(PKGS)
	cd bench && $(GO) vet ./...
	$(GOLANGCI_LINT) run $(PKGS)

cover: ## test coverage summary
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS) && $(GO) tool cover -func=cover.out | tail -1
