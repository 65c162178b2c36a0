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

# Test-only tools: dynalite (npm) for DynamoDB; Chromium for the page tests.
test-deps:
	@command -v node >/dev/null || { echo "node is required (apt-get install nodejs npm)"; exit 1; }
	@if [ ! -x node_modules/.bin/dynalite ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
		npm ci --no-audit --no-fund; fi

test: test-deps build
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
