# Jetway's two commands (see README): `make run` and `make test`.
# Both do their own set-up on a fresh machine.

GO ?= go
# The one production build: the Dockerfile runs exactly this line (checked by a test).
BUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o bin/gateway ./cmd/gateway

.PHONY: run test build deps test-deps bench web-vendor jaeger example

run:
	$(GO) run ./cmd/gateway

build:
	$(BUILD)

NPM_CI = if [ ! -x node_modules/.bin/dynalite ] || [ ! -f node_modules/ws/package.json ] || [ ! -f node_modules/openai/package.json ] || \
	[ ! -f node_modules/@anthropic-ai/sdk/package.json ] || [ ! -x node_modules/.bin/claude ] || [ ! -x node_modules/.bin/codex ] || [ ! -f node_modules/marked/package.json ] || [ ! -f node_modules/dompurify/package.json ] || [ ! -f node_modules/chart.js/package.json ] || [ ! -f node_modules/@duckdb/node-api/package.json ] || [ ! -f node_modules/ai/package.json ] || \
	[ package-lock.json -nt node_modules/.package-lock.json ]; then \
	npm ci --no-audit --no-fund; fi

# Jaeger v2 receives the tracing tests' spans (internal/jaegertest): `jaeger` from PATH, else cmd/jaeger of
# this module version built once, outside this module, into the user cache directory, where the tests look.
JAEGER_MODULE = github.com/jaegertracing/jaeger@v1.76.0
JAEGER_BIN = $${XDG_CACHE_HOME:-$$HOME/.cache}/jetway/jaeger-v1.76.0/jaeger

jaeger:
	@if ! command -v jaeger >/dev/null && [ ! -x "$(JAEGER_BIN)" ]; then \
		echo "building $(JAEGER_MODULE) (once; a few minutes)"; \
		dir=$$(cd "$$(mktemp -d)" && $(GO) mod download -json $(JAEGER_MODULE) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
		[ -n "$$dir" ] || { echo "go mod download $(JAEGER_MODULE) failed"; exit 1; }; \
		src=$$(mktemp -d) && cp -R "$$dir"/. "$$src" && chmod -R u+w "$$src" && mkdir -p "$$(dirname "$(JAEGER_BIN)")" && \
		(cd "$$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod $(GO) build -o "$(JAEGER_BIN).tmp" ./cmd/jaeger) && \
		mv "$(JAEGER_BIN).tmp" "$(JAEGER_BIN)" && rm -rf "$$src"; fi

# Test-only tools: dynalite (npm) for DynamoDB, the openai and @anthropic-ai/sdk packages for the OpenAI, Responses and Anthropic doors, Codex CLI (@openai/codex), ai for the AI SDK door, DuckDB (@duckdb/node-api,
# prebuilt) as the stand-in for Athena in deploy/terraform's query tests; Chromium for the page tests;
# HAProxy as the load balancer in front of several gateways (cmd/gateway's HAProxy tests); Jaeger (above).
# The AI SDK example frontend (examples/ai-sdk-chat, its own package.json and lock): its
# packages, and its build, which web's browser test serves (rebuilt when a source is newer).
EXAMPLE = examples/ai-sdk-chat
example:
	@node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)' || \
		{ echo "$(EXAMPLE) (Vite 8) needs Node.js 20.19 or later; node is $$(node --version)"; exit 1; }
	@cd $(EXAMPLE) && if [ ! -f node_modules/ai/package.json ] || [ ! -f node_modules/.package-lock.json ] || \
		[ package-lock.json -nt node_modules/.package-lock.json ]; then npm ci --no-audit --no-fund; fi
	@cd $(EXAMPLE) && if [ ! -f dist/index.html ] || [ -n "$$(find index.html vite.config.js package-lock.json src -newer dist/index.html)" ]; then \
		npm run build; fi

test-deps: jaeger example
	@command -v node >/dev/null || { echo "node is required (apt-get install nodejs npm)"; exit 1; }
	@$(NPM_CI)
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" -ne 0 ]; then echo "Debian's chromium is required for the page tests: sudo apt-get install -y chromium"; exit 1; fi; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium; fi
	@if [ ! -x /usr/sbin/haproxy ]; then \
		if [ "$$(id -u)" -ne 0 ]; then echo "Debian's haproxy is required for the load-balancer tests: sudo apt-get install -y haproxy"; exit 1; fi; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq haproxy; fi

test: test-deps build
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The demo page's Markdown parser and sanitizer (npm marked and dompurify, at
# the versions pinned in package.json) are committed under web/static/vendor
# so that the binary embeds them; after changing a pin, run this and commit.
# TestVendoredModules checks the copies. Keep the list in step with web.vendored.
web-vendor:
	@$(NPM_CI)
	cp node_modules/marked/lib/marked.esm.js node_modules/dompurify/dist/purify.es.mjs web/static/vendor/
	cp node_modules/chart.js/dist/chart.umd.js web/admin/vendor/
