#!/usr/bin/env bash
# bench-placements.sh [plain|failover]: issue 35's cost in the production shape. Gateway A in memory, mock-a without
# placements; gateway B with the quota, requests, cache and members tables on dynalite behind a 2.5 ms proxy, mock-a in
# us-west-2 and eu-west-1 of the mock; direct calls to the mock beside both (loadtest overhead), the realistic pace.
# failover: the mock throttles every us-west-2 call, B's breakers never open and no conversation remembers its move,
# so every request whose first choice is us-west-2 pays the throttled call (docs/benchmarks.md, "Placements, failover
# and tiers").
cd "$(dirname "$0")/.."
MODE=${1:-plain}
OUT=${OUT:-/tmp/jetway-bench}; mkdir -p $OUT
BIN=$OUT/gw-placements
go build -o $BIN ./cmd/gateway && go build -o $OUT/loadtest ./cmd/loadtest && go build -o $OUT/delayproxy ./cmd/delayproxy && go build -o $OUT/mockbedrock ./cmd/mockbedrock || exit 1
ulimit -n 20000
$OUT/mockbedrock --listen 127.0.0.1:18690 --ttft 250ms --per-token 8ms > /dev/null 2>&1 & MOCK=$!
node -r ./internal/dynalitetest/hangups.cjs node_modules/.bin/dynalite --port 18750 > /dev/null 2>&1 & DYN=$!
sleep 1.5
$OUT/delayproxy --upstream 127.0.0.1:18750 --delay 2.5ms --listen 127.0.0.1:18751 > $OUT/proxy.addr 2>&1 & PX=$!
sleep 0.5
python3 - "$OUT/placed.yaml" <<'PY'
import sys
s = open('cmd/loadtest/testdata/bench.yaml').read()
head = "  - id: mock-a\n    bedrock_id: mock-a\n"
assert head in s
open(sys.argv[1], 'w').write(s.replace(head, head + "    placements: [{region: us-west-2}, {region: eu-west-1}]\n", 1))
PY
COMMON="AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://127.0.0.1:18690 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1 JETWAY_DEV_KEY_FILE=$OUT/dev-key.pem JETWAY_USAGE_DIR=$OUT/usage JETWAY_MAX_CONNS_PER_USER=32 JETWAY_MAX_INFLIGHT_PER_USER=32"
L=$RANDOM
TB="JETWAY_QUOTA_TABLE=pq-$L JETWAY_REQUESTS_TABLE=pr-$L JETWAY_CACHE_TABLE=pc-$L JETWAY_MEMBERS_TABLE=pm-$L"
env $COMMON $TB JETWAY_CONFIG=$OUT/placed.yaml AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18750 $BIN tables create > /dev/null || exit 1
EXTRA=""
if [ "$MODE" = failover ]; then
  curl -sf -X PUT 127.0.0.1:18690/faults -d '{"region":"us-west-2","throttle_percent":100}' || exit 1
  EXTRA="JETWAY_BREAKER_THRESHOLD=1000000000 JETWAY_PLACEMENT_AFFINITY_TTL=1ns"
fi
env $COMMON JETWAY_CONFIG=cmd/loadtest/testdata/bench.yaml JETWAY_LISTEN=127.0.0.1:18615 JETWAY_ADMIN_LISTEN=127.0.0.1:19615 $BIN > $OUT/a.log 2>&1 & A=$!
env $COMMON $TB $EXTRA JETWAY_CONFIG=$OUT/placed.yaml AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18751 \
  JETWAY_LISTEN=127.0.0.1:18616 JETWAY_ADMIN_LISTEN=127.0.0.1:19616 $BIN > $OUT/b.log 2>&1 & B=$!
for i in $(seq 100); do grep -q listening $OUT/a.log && grep -q listening $OUT/b.log && break; sleep 0.2; done
TOKENS="$BIN token --sub {user} --tenant {tenant} --app {app} --config cmd/loadtest/testdata/bench.yaml --dev-key-file $OUT/dev-key.pem"
echo "== $MODE (load $(cut -d' ' -f1-3 /proc/loadavg))"
$OUT/loadtest overhead --streams 20 --rounds 11 --warmup 1 --url ws://127.0.0.1:18615/v1/ws \
  --compare-url ws://127.0.0.1:18616/v1/ws --admin-url http://127.0.0.1:19615 \
  --bedrock-url http://127.0.0.1:18690 --token-cmd "$TOKENS" 2>&1 | grep -E "^\| (TTFT|Successful|Errors|Requests that)|Events lost|^\| [0-9]+ of"
echo "mock: $(curl -s 127.0.0.1:18690/stats | python3 -c 'import sys,json;d=json.load(sys.stdin);print("calls by region",d["by_region"],"throttled",d["throttled_by_region"])')"
kill $A $B; wait $A $B 2>/dev/null # the gateways drain while their tables are still there
kill $PX $DYN $MOCK; wait 2>/dev/null
