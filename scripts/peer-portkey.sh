#!/bin/sh
# peer-portkey.sh: Portkey's open-source gateway (npm @portkey-ai/gateway 1.15.2),
# the peer of Jetway's benchmarks, in the foreground on port $PORTKEY_PORT
# (default 8787, every interface: Portkey takes no address). It installs it once into
# ${XDG_CACHE_HOME:-$HOME/.cache}/jetway/peer-portkey (outside the repository;
# PORTKEY_DIR overrides), then runs it headless (no UI) with exec, so its pid is
# this script's and a signal stops it. Extra arguments go to Portkey.
#
# Needs node >= 18 and npm (the npm registry the first time only).
#
# Against the mock (cmd/mockbedrock --listen 127.0.0.1:8090), Portkey acts as a
# Bedrock provider for OpenAI-style POST /v1/chat/completions with these headers
# (the mock does not check signatures; it reads the region from the SigV4 scope
# Portkey signs with, so x-portkey-aws-region picks the mock's region):
#
#   content-type: application/json
#   x-portkey-provider: bedrock
#   x-portkey-aws-access-key-id: AKIDMOCK
#   x-portkey-aws-secret-access-key: mocksecret
#   x-portkey-aws-region: us-east-1
#   x-portkey-custom-host: http://127.0.0.1:8090
#
# and the body {"model":"mock-a","messages":[{"role":"user","content":"hello"}]},
# with "stream": true for SSE chunks (optional "max_tokens" becomes
# inferenceConfig.maxTokens). Non-streaming calls reach the mock's
# POST /model/{model}/converse, streaming ones POST /model/{model}/converse-stream;
# Portkey retries nothing unless asked (x-portkey-retry-count). E.g.
#
#   curl -s http://127.0.0.1:8787/v1/chat/completions -H content-type:application/json \
#     -H x-portkey-provider:bedrock -H x-portkey-aws-access-key-id:AKIDMOCK \
#     -H x-portkey-aws-secret-access-key:mocksecret -H x-portkey-aws-region:us-east-1 \
#     -H x-portkey-custom-host:http://127.0.0.1:8090 \
#     -d '{"model":"mock-a","messages":[{"role":"user","content":"hello"}],"stream":true}'
set -eu

VERSION=1.15.2
DIR=${PORTKEY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/jetway/peer-portkey}
PORT=${PORTKEY_PORT:-8787}
PKG=$DIR/node_modules/@portkey-ai/gateway

installed=$(node -p "require('$PKG/package.json').version" 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
	mkdir -p "$DIR"
	npm install --prefix "$DIR" "@portkey-ai/gateway@$VERSION" --no-audit --no-fund >&2
fi

exec node "$PKG/build/start-server.js" --port="$PORT" --headless "$@"
