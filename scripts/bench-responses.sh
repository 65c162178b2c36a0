#!/usr/bin/env bash
# bench-responses.sh SESSIONS TURNS: a tool loop through the Responses door, POST /v1/responses with the full input every
# turn (gateway A) and WebSocket mode with the new input and previous_response_id (gateway B), both arms at once, with direct
# calls to the mock; both gateways in the production shape (tables in dynalite behind a 2.5 ms proxy), the realistic pace
# (answers of 100 tokens).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/jetway-bench}; mkdir -p $OUT
SESSIONS=$1; TURNS=$2; BIN=$OUT/gw-responses
go build -o $BIN ./cmd/gateway && go build -o $OUT/loadtest ./cmd/loadtest && go build -o $OUT/delayproxy ./cmd/delayproxy && go build -o $OUT/mockbedrock ./cmd/mockbedrock || exit 1
$OUT/mockbedrock --listen 127.0.0.1:18690 --ttft 250ms --per-token 8ms --tokens 100 > /dev/null 2>&1 & MOCK=$!
node -r ./internal/dynalitetest/hangups.cjs node_modules/.bin/dynalite --port 18750 > /dev/null 2>&1 & DYN=$!
sleep 1.5
$OUT/delayproxy --upstream 127.0.0.1:18750 --delay 2.5ms --listen 127.0.0.1:18751 > $OUT/proxy.addr 2>&1 & PX=$!
sleep 0.5
COMMON="JETWAY_CONFIG=cmd/loadtest/testdata/bench.yaml AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://127.0.0.1:18690 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1 JETWAY_DEV_KEY_FILE=$OUT/dev-key.pem JETWAY_USAGE_DIR=$OUT/usage"
L=$RANDOM
TA="JETWAY_QUOTA_TABLE=aq-$L JETWAY_REQUESTS_TABLE=ar-$L JETWAY_CACHE_TABLE=ac-$L JETWAY_MEMBERS_TABLE=am-$L"
TB="JETWAY_QUOTA_TABLE=bq-$L JETWAY_REQUESTS_TABLE=br-$L JETWAY_CACHE_TABLE=bc-$L JETWAY_MEMBERS_TABLE=bm-$L"
for T in "$TA" "$TB"; do env $COMMON $T AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18750 $BIN tables create > /dev/null || exit 1; done
env $COMMON $TA AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18751 JETWAY_LISTEN=127.0.0.1:18615 JETWAY_ADMIN_LISTEN=127.0.0.1:19615 $BIN > $OUT/a.log 2>&1 & A=$!
env $COMMON $TB AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18751 JETWAY_LISTEN=127.0.0.1:18616 JETWAY_ADMIN_LISTEN=127.0.0.1:19616 $BIN > $OUT/b.log 2>&1 & B=$!
for i in $(seq 100); do grep -q listening $OUT/a.log && grep -q listening $OUT/b.log && break; sleep 0.2; done
TOKENS="$BIN token --sub {user} --tenant {tenant} --app {app} --config cmd/loadtest/testdata/bench.yaml --dev-key-file $OUT/dev-key.pem"
echo "== $SESSIONS sessions x $TURNS turns (load $(cut -d' ' -f1 /proc/loadavg))"
$OUT/loadtest responses --streams $SESSIONS --turns $TURNS --url http://127.0.0.1:18615 --pid $A \
  --compare-url ws://127.0.0.1:18616 --compare-pid $B --admin-url http://127.0.0.1:19615 \
  --bedrock-url http://127.0.0.1:18690 --token-cmd "$TOKENS" --progress off --json 2>&1 > $OUT/responses-$SESSIONS.json | tail -5
kill $A $B; wait $A $B 2>/dev/null # the gateways drain while their tables are still there
kill $PX $DYN $MOCK; wait 2>/dev/null
