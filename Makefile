# Sluice — make help lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/sluice
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Integration tests run against the real Kafka and ClickHouse started by deploy/local.
LOCAL_ENV = set -a; eval "$$(deploy/local/up.sh)"; set +a
# Packages that have integration tests (files tagged `integration`).
INTEGRATION_PKGS = $(shell grep -rl --include='*_test.go' '^//go:build integration' . | xargs -n1 dirname | sort -u)

.PHONY: help build run test test-unit test-integration simulate bench up down lint fuzz clean sdk-deps alerts

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

build: ## build bin/sluice
	$(GO) build -o $(BIN) ./services/sluice

run: build ## run the whole stack in one process (embedded Kafka, simulator, ledger, gateway) and print where to point an SDK
	$(BIN) dev

test: ## lint, start real Kafka + ClickHouse on loopback (installs them if missing) and run every test
	$(MAKE) lint
	$(MAKE) sdk-deps
	$(MAKE) test-unit
	$(MAKE) simulate
	$(MAKE) alerts
	$(MAKE) test-integration

test-unit: ## unit, property and golden tests (no external services)
	$(GO) vet ./...
	$(GO) test -count=1 ./...

test-integration: up ## integration tests against the real Kafka broker and ClickHouse server
	deploy/local/prometheus.sh install
	$(LOCAL_ENV); $(GO) test -count=1 -p 1 -tags integration -timeout 30m $(INTEGRATION_PKGS)

SEEDS ?= 200
simulate: ## the seeded whole-pipeline simulation (internal/pipesim) over SEEDS seeds (default 200); prints each failing seed's rerun command
	set -o pipefail; $(GO) test -count=1 -run TestPipeline ./internal/pipesim -seeds=$(SEEDS) -v | grep -v '^    pipesim_test.go:[0-9]*: seed [0-9]*: {'

bench: build up ## benchmarks that print JSON (pure ledger, codec, gateway, ledger on the real broker)
	$(BIN) bench ledger --json
	$(BIN) bench codec --json
	$(BIN) bench gateway --json
	$(LOCAL_ENV); $(BIN) bench ledger-kafka --json

alerts: ## promtool check + unit-test the alerting rules in dashboards/alerts (installs Debian's prometheus if missing)
	deploy/local/prometheus.sh test-rules

sdk-deps: ## install the pinned openai/anthropic Python SDKs for the black-box tests
	bash sdktest/setup.sh

up: ## start (or reuse) Kafka and ClickHouse on loopback; prints their env lines
	@deploy/local/up.sh

down: ## stop the Kafka and ClickHouse that `make up` started
	@deploy/local/down.sh

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) run $(STATICCHECK) ./...

fuzz: ## run each fuzz target for FUZZTIME (default 20s)
	@for t in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$t/*_test.go | cut -d' ' -f2); do \
	    echo "== $$t $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$t || exit 1; \
	  done; done

clean: ## remove build output
	rm -rf bin
