# Vantage: make targets. `make` alone lists them.
.DEFAULT_GOAL := help
GO ?= go
PKGS := ./...

.PHONY: help demo test test-race test-short bench lint cover tools

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

demo: ## run the orders example on the in-memory backend
	$(GO) run ./examples/orders

test: ## run every test with the race detector (PostgreSQL suite included)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

test-race: test ## alias of test

test-short: ## run the tests without the race detector
	$(GO) test -count=1 $(PKGS)

bench: ## run the Go benchmarks of the hot core pieces
	$(GO) test -run '^$$' -bench . -benchmem ./core/...

lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

cover: ## test coverage summary
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS) && $(GO) tool cover -func=cover.out | tail -1
