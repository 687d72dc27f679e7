# The Temporal CLI (dev server + Web UI), the Temporal server and its SQL schema tool live in their
# own module, tools/go.mod: they cannot share the main module's dependency graph
# (docs/architecture.md). The server and the sql tool are for the production-shape test
# (Temporal on PostgreSQL, docs/deployment.md); promtool (monitoring/go.mod) for the alert tests.
# make run builds only what it runs: the Temporal CLI and our binaries. Every tool build goes
# through scripts/build-step.sh, which says what it builds and how long it takes while it does.
# bash with pipefail: the fault targets pipe go test through grep, and a pipeline's status would
# otherwise be grep's (a failed scenario exited 0)
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c
BIN        := .bin
PROVISIONER := $(BIN)/choria-provisioner
DEV        := $(BIN)/choria-provisioner-dev
TEMPORAL   := $(BIN)/temporal
TEMPORAL_SERVER := $(BIN)/temporal-server
TEMPORAL_SQL_TOOL := $(BIN)/temporal-sql-tool
NFPM       := $(BIN)/nfpm
TEMPORAL_UI_SERVER := $(BIN)/temporal-ui-server
PROMTOOL   := $(BIN)/promtool
STEP       := scripts/build-step.sh
# --version prints both; the packages carry VERSION (scripts/version.sh: from git describe)
VERSION    ?= $(shell scripts/version.sh)
COMMIT     ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PKG_DIR    ?= dist
PKG_ARCH   ?= $(shell go env GOARCH)
GO_TEST    ?= go test
# -parallel 3: the integration tests that wait more than they work (the partition scenarios, the
# operator tests: internal/integration/main_test.go) run three at a time; go test's default is
# the number of cores, two on CI
TEST_FLAGS ?= -count=1 -timeout 40m -parallel 3

.PHONY: all deps build binaries tools package run test test-monitoring test-chart test-compose test-unit test-integration test-faults test-faults-scale test-faults-full test-faults-slow test-faults-postgres test-faults-disk test-soak lint compose-check bench bench-small-fleet clean

all: build

# With an empty Go build cache each is minutes (on 2 cores busy with other builds, the Temporal CLI
# and our binaries side by side took 21 min); once cached, seconds. Tools are linked without DWARF (-s -w):
# it is most of a link, and nobody debugs them; panics still print their stacks.
$(TEMPORAL): tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "the Temporal CLI (dev server and Web UI)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C tools build -ldflags "-s -w" -o ../$(TEMPORAL) github.com/temporalio/cli/cmd/temporal

$(TEMPORAL_SERVER): tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "the Temporal server (make test's PostgreSQL test)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C tools build -ldflags "-s -w" -o ../$(TEMPORAL_SERVER) go.temporal.io/server/cmd/server

$(TEMPORAL_SQL_TOOL): tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "temporal-sql-tool (make test's PostgreSQL test)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C tools build -ldflags "-s -w" -o ../$(TEMPORAL_SQL_TOOL) go.temporal.io/server/cmd/tools/sql

# the Web UI server on its own (the same module and version the CLI embeds), for the compose
# stack's temporalio/ui stand-in
$(TEMPORAL_UI_SERVER): tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "the Temporal Web UI server (make test's compose test)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C tools build -ldflags "-s -w" -o ../$(TEMPORAL_UI_SERVER) github.com/temporalio/ui-server/v2/cmd/server

$(NFPM): tools/go.mod tools/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "nfpm (make package)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C tools build -ldflags "-s -w" -o ../$(NFPM) github.com/goreleaser/nfpm/v2/cmd/nfpm

# remove_all_sd: promtool without Prometheus' service discovery plugins (a fifth fewer packages to
# compile); unit-testing rules needs none of them
$(PROMTOOL): monitoring/go.mod monitoring/go.sum
	@mkdir -p $(BIN)
	@$(STEP) "promtool (make test's alert rule tests)" "once: minutes with an empty Go build cache, seconds after" \
	  go -C monitoring build -mod=mod -tags remove_all_sd -ldflags "-s -w" -o ../$(PROMTOOL) github.com/prometheus/prometheus/cmd/promtool

## tools: every tool the tests and packaging use (make run needs only the Temporal CLI)
tools: $(TEMPORAL) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) $(NFPM) $(PROMTOOL)

## build: what make run runs, the Temporal CLI and our three binaries, built at the same time (-j2:
## with a warm build cache they are mostly links, each on one core). One go build for our three
## compiles their shared packages once and links them in parallel, without DWARF as well (a
## debugger wants its own go build).
build:
	@$(MAKE) --no-print-directory -j2 $(TEMPORAL) binaries

binaries:
	@mkdir -p $(BIN)
	@$(STEP) "choria-provisioner, choria-provisioner-dev and example-helper" "minutes with an empty Go build cache, seconds after" \
	  go build -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/ ./cmd/choria-provisioner ./cmd/choria-provisioner-dev ./cmd/example-helper

## package: $(PKG_DIR)/choria-provisioner_<version>_<arch>.deb and choria-provisioner-<version>-1.<arch>.rpm,
## the product binary (static, so one build serves Debian and EL) with its unit, logrotate file and
## example configuration (packaging/, docs/deployment.md); PKG_ARCH=arm64 cross-builds
package: $(NFPM)
	@mkdir -p $(PKG_DIR)/build
	CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) go build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(PKG_DIR)/build/choria-provisioner-$(PKG_ARCH) ./cmd/choria-provisioner
	@for p in deb rpm; do \
	  PKG_VERSION=$(VERSION) PKG_ARCH=$(PKG_ARCH) PKG_BINARY=$(PKG_DIR)/build/choria-provisioner-$(PKG_ARCH) \
	  SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	  $(NFPM) package --config packaging/nfpm.yaml --packager $$p --target $(PKG_DIR)/ || exit 1; \
	done

## run: the embedded default — Temporal dev server with Web UI, broker, provisioner, demo fleet
run: build
	$(DEV) dev $(ARGS)

## test: unit tests, then integration tests against real Temporal, broker and go-choria servers
## deps: Debian packages the tests need (installed when missing and running as root)
deps:
	@scripts/deps.sh

test: deps tools lint compose-check test-monitoring
	$(GO_TEST) $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory test-chart
	$(MAKE) --no-print-directory test-compose

## test-monitoring: the dashboard's and the alert rules' queries parse and name only exported
## series, and promtool's unit tests of every alert (monitoring/, docs/operations.md). Like the
## chart's, its module replaces the main module with this checkout (for common/metrics), so it
## runs with -mod=mod: a version the main go.mod raises is taken into monitoring/go.mod rather than
## failing the run (commit what that changes, or go -C monitoring mod tidy after changing go.mod).
test-monitoring: $(PROMTOOL)
	go -C monitoring test -mod=mod -count=1 ./...
	$(PROMTOOL) check rules monitoring/prometheus/alerts.yaml
	$(PROMTOOL) test rules monitoring/prometheus/alerts_test.yaml

## test-chart: the Helm chart (deploy/helm/choria-provisioner) rendered with Helm's Go module for
## the default values and the examples, every object decoded strictly into Kubernetes' API types,
## the pods against the restricted Pod Security Standard, the configuration through config.Load.
## Its own module, deploy/helm/go.mod: Helm and k8s.io stay out of the product's dependencies.
## It uses this checkout's config package (a replace of the main module), so a version the main
## go.mod raises is taken into its go.mod and go.sum here (-mod=mod) rather than failing the run;
## commit what that changes (or run go -C deploy/helm mod tidy after changing go.mod).
test-chart:
	go -C deploy/helm vet -mod=mod ./...
	$(GO_TEST) -C deploy/helm -mod=mod $(TEST_FLAGS) ./...

## test-compose: docker-compose.yaml run for real on an engine of the project's own, every image
## built here without a registry (scripts/test-compose.sh; needs root; docs/operations.md)
test-compose: deps tools $(TEMPORAL_UI_SERVER)
	scripts/test-compose.sh

test-unit:
	$(GO_TEST) -short -count=1 ./...

test-integration: tools
	$(GO_TEST) $(TEST_FLAGS) -run Integration ./...

## test-faults-scale: kill -9 with 500 simulated hosts in flight, two replicas on 1,000, and the
## production shape (Temporal on PostgreSQL) on 1,000 (minutes; results in docs/reliability.md)
test-faults-scale: deps tools
	FAULTS_SCALE=1 $(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFaultScale|IntegrationFaultPostgres' ./internal/integration/ 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|FAULT'

## test-faults: the fault scenarios alone (they also run in make test); results: docs/reliability.md
test-faults: deps tools
	$(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFault' ./internal/integration/ 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|FAULT' 

FAULTS_GREP := grep -E '^(=== RUN|--- |ok|FAIL|PASS)|FAULT|latest run failed|Error|Messages'

## test-faults-full: the compound scenario on 2,000 simulated hosts, the partitions, kill during
## restart and fast-mode scenarios at full size (make test runs them smaller); COMPOUND_HOSTS=10000
test-faults-full: deps tools
	FAULTS_COMPOUND_HOSTS=$(or $(COMPOUND_HOSTS),2000) FAULTS_PARTITION_HOSTS=500 FAULTS_RESTART_HOSTS=1000 FAULTS_FAST_HOSTS=1000 \
		$(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFault(Compound|Partitions|KillDuringRestart|FastModeKillAfterConfigure)$$' ./internal/integration/ 2>&1 | $(FAULTS_GREP)

## test-faults-slow: 300 ms ± 200 ms on every reply from the broker and Temporal during a
## 1,000-host burst, against the same burst without (SLOW_HOSTS=...)
test-faults-slow: deps tools
	FAULTS_SLOW=1 FAULTS_SLOW_HOSTS=$(or $(SLOW_HOSTS),1000) $(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFaultSlowLinks$$' ./internal/integration/ 2>&1 | $(FAULTS_GREP)

## test-faults-postgres: PostgreSQL restarted under load in the production shape (PG_HOSTS=500)
test-faults-postgres: deps tools
	FAULTS_POSTGRES=1 FAULTS_POSTGRES_HOSTS=$(or $(PG_HOSTS),500) $(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFaultPostgresRestart$$' ./internal/integration/ 2>&1 | $(FAULTS_GREP)

## test-faults-disk: the dev server's SQLite file on a small tmpfs filled under load (needs root;
## DISK_HOSTS=500, DISK_FULL=30s)
test-faults-disk: deps tools
	FAULTS_DISK=1 FAULTS_DISK_HOSTS=$(or $(DISK_HOSTS),500) FAULTS_DISK_FULL=$(or $(DISK_FULL),30s) $(GO_TEST) $(TEST_FLAGS) -v -run 'IntegrationFaultDiskFull$$' ./internal/integration/ 2>&1 | $(FAULTS_GREP)

## test-soak: 5 hosts/s for SOAK (60m) with a fault every SOAK_EVERY (5m) (SOAK_ONLY: those whose names contain it; SOAK_SHAPE=postgres: the production shape); RSS and goroutine slopes
test-soak: deps tools
	FAULTS_SOAK=$(or $(SOAK),60m) $(if $(SOAK_EVERY),FAULTS_SOAK_EVERY=$(SOAK_EVERY)) $(if $(SOAK_ONLY),FAULTS_SOAK_ONLY='$(SOAK_ONLY)') $(if $(SOAK_SHAPE),FAULTS_SOAK_SHAPE=$(SOAK_SHAPE)) $(GO_TEST) -count=1 -timeout 3h -v -run 'IntegrationFaultSoak$$' ./internal/integration/ 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|FAULT|soak (\+|series|goroutines)|latest run failed|times; run |Error|Messages'

## compose-check: docker-compose.yaml must parse (Debian's docker-compose needs no engine for this)
compose-check:
	@command -v docker-compose >/dev/null || { echo "docker-compose is needed to validate docker-compose.yaml: apt-get install docker-compose"; exit 1; }
	docker-compose -f docker-compose.yaml config -q

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go vet -tags compose ./internal/integration/
	go -C monitoring vet -mod=mod ./...

## bench: the benchmark scenarios (docs/performance.md) on the dev stack with a simulated fleet;
## BENCH_SCENARIOS=burst-500,steady-5 selects, BENCH_HOSTS overrides the host counts (not a test);
## BENCH_BASELINE=older/choria-provisioner and BENCH_ORIGINAL=path/to/the/Choria/Provisioner run
## them on the same scenarios in the same invocation and print this build's metrics as ratios
## (of the mean of this build's runs before and after theirs: the machine drifts within an invocation);
## BENCH_ROUNDS=3 runs every build three times in turns and reports medians and the ratios' range
BENCH_SCENARIOS ?= burst-500,burst-500-fast,steady-5,flaky-5pct,flaky-5pct-steady,burst-10000
bench: build
	$(DEV) bench --scenarios $(BENCH_SCENARIOS) $(if $(BENCH_HOSTS),--hosts $(BENCH_HOSTS)) \
		$(if $(BENCH_BASELINE),--baseline-bin $(BENCH_BASELINE)) $(if $(BENCH_ORIGINAL),--original-bin $(BENCH_ORIGINAL)) \
		$(if $(BENCH_BASELINE)$(BENCH_ORIGINAL),--bracket) $(if $(BENCH_ROUNDS),--rounds $(BENCH_ROUNDS)) $(BENCH_ARGS)

## bench-small-fleet: provisioner start to 10 real waiting servers connected, 5 runs (docs/performance.md);
## BEFORE_BIN=path adds another build of this project, ORIGINAL_BIN=path the Choria Provisioner
bench-small-fleet: build
	$(DEV) small-fleet --breakdown --target "this build=$(PROVISIONER)" $(if $(BEFORE_BIN),--target "before=$(BEFORE_BIN)") $(if $(ORIGINAL_BIN),--original "Choria Provisioner=$(ORIGINAL_BIN)")

clean:
	@scripts/docker-engine.sh stop
	rm -rf $(BIN) .state $(PKG_DIR)
