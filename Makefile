# Jetway's two commands (see README): `make run` and `make test`.
# Both do their own set-up on a fresh machine.

GO ?= go
# The one production build: the Dockerfile runs exactly this line (checked by a test).
BUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o bin/gateway ./cmd/gateway

.PHONY: run test build deps test-deps bench

run:
	$(GO) run ./cmd/gateway

build:
	$(BUILD)

# Test-only tools: dynalite (npm) for DynamoDB, the openai package for the OpenAI door; Chromium for the page tests.
test-deps:
	@command -v node >/dev/null || { echo "node is required (apt-get install nodejs npm)"; exit 1; }
	@if [ ! -x node_modules/.bin/dynalite ] || [ ! -f node_modules/ws/package.json ] || [ ! -f node_modules/openai/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
		npm ci --no-audit --no-fund; fi
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" -ne 0 ]; then echo "Debian's chromium is required for the page tests: sudo apt-get install -y chromium"; exit 1; fi; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium; fi

test: test-deps build
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
