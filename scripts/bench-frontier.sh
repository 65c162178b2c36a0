#!/usr/bin/env bash
# bench-frontier.sh: issue 36's harness, every number in one run on this machine (docs/benchmarks.md, "The harness").
#   1. the throughput frontier, non-streaming, mock at 0 ms: the OpenAI, Anthropic and Responses doors of gateway P
#      (the production shape: quota, requests, cache and members tables on dynalite behind a 2.5 ms-each-way proxy),
#      the OpenAI door of gateway M (in memory), and the peer (Portkey, scripts/peer-portkey.sh, unless PEER=none),
#      each beside as many direct calls to the mock (loadtest frontier);
#   2. streaming at 100 paced streams (250 ms + 8 ms per token, 300 tokens): added TTFT, added per-chunk gap and
#      CPU per chunk of /v1/ws on gateway S (production shape) beside the direct call and the peer's SSE, then the
#      OpenAI door's (loadtest overhead); 100 paced streams back to back: CPU per chunk frame, RSS at the end (capacity);
#   3. idle sessions: RSS per session at 10,000 on gateway S, heartbeats on, and at the open-file limit less 1,000
#      on gateway R (in memory) (loadtest capacity);
#   4. the soak: 200 streaming sessions (reconnects on, a cut every 5 s) and 200 non-streaming requests a second on
#      gateway R (in memory, paced mock) for SOAK (default 10m): RSS by interval, its slope, lost and never finished (loadtest soak + rate).
# Settings: OUT (/tmp/jetway-bench), RATES (frontier steps), STEP (10s measured per step), SOAK (10m), PEER
# (portkey|none), PHASES (any of frontier,stream,idle,soak; default all).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/jetway-bench}; mkdir -p $OUT
RATES=${RATES:-250,500,1000,1500,2000,2500,3000}
STEP=${STEP:-10s}
SOAK=${SOAK:-10m}
PEER=${PEER:-portkey}
PHASES=${PHASES:-frontier,stream,idle,soak}
BIN=$OUT/gw-frontier
go build -o $BIN ./cmd/gateway && go build -o $OUT/loadtest ./cmd/loadtest && go build -o $OUT/delayproxy ./cmd/delayproxy && go build -o $OUT/mockbedrock ./cmd/mockbedrock || exit 1
ulimit -n "$(ulimit -Hn)"
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
has() { case ",$PHASES," in *",$1,"*) return 0;; esac; return 1; }
$OUT/mockbedrock --listen 127.0.0.1:18790 --ttft 0 --per-token 0 --tokens 16 > /dev/null 2>&1 & PIDS+=($!)
$OUT/mockbedrock --listen 127.0.0.1:18791 --ttft 250ms --per-token 8ms --tokens 300 > /dev/null 2>&1 & PIDS+=($!)
node -r ./internal/dynalitetest/hangups.cjs node_modules/.bin/dynalite --port 18850 > /dev/null 2>&1 & PIDS+=($!)
sleep 1.5
$OUT/delayproxy --upstream 127.0.0.1:18850 --delay 2.5ms --listen 127.0.0.1:18851 > $OUT/proxy.addr 2>&1 & PIDS+=($!)
sleep 0.5
CONFIG=cmd/loadtest/testdata/bench.yaml
COMMON="AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1 JETWAY_CONFIG=$CONFIG JETWAY_DEV_KEY_FILE=$OUT/dev-key.pem
  JETWAY_USAGE_DIR=$OUT/usage JETWAY_MAX_CONNS_PER_USER=32 JETWAY_MAX_INFLIGHT_PER_USER=64 GOMEMLIMIT=716MiB"
L=$RANDOM
TABLES="JETWAY_QUOTA_TABLE=fq-$L JETWAY_REQUESTS_TABLE=fr-$L JETWAY_CACHE_TABLE=fc-$L JETWAY_MEMBERS_TABLE=fm-$L AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:18851"
env $COMMON $TABLES $BIN tables create > /dev/null || exit 1
# start NAME LISTEN ADMIN MOCK [ENV...]: a gateway in the background; its pid in $NAME.
start() {
  local name=$1 listen=$2 admin=$3 mock=$4; shift 4
  env $COMMON "$@" AWS_ENDPOINT_URL_BEDROCK_RUNTIME=http://$mock JETWAY_LISTEN=$listen JETWAY_ADMIN_LISTEN=$admin $BIN > $OUT/$name.log 2>&1 &
  PIDS+=($!); printf -v "$name" %s $!
  for i in $(seq 300); do grep -q listening $OUT/$name.log && return 0; sleep 0.2; done
  echo "gateway $name did not start: $OUT/$name.log"; exit 1
}
start P 127.0.0.1:18815 127.0.0.1:19815 127.0.0.1:18790 $TABLES
start M 127.0.0.1:18816 127.0.0.1:19816 127.0.0.1:18790
start S 127.0.0.1:18817 127.0.0.1:19817 127.0.0.1:18791 $TABLES
start R 127.0.0.1:18818 127.0.0.1:19818 127.0.0.1:18791
PEER_ARGS=(); PEER_STREAM=()
if [ "$PEER" = portkey ]; then
  PORTKEY_PORT=18787 scripts/peer-portkey.sh > $OUT/portkey.log 2>&1 & PK=$!; PIDS+=($PK) # the script execs node: $! is Portkey
  for i in $(seq 300); do grep -q 'Ready for connections' $OUT/portkey.log && break; sleep 0.2; done
  # headers: see scripts/peer-portkey.sh
  PH=(--peer-header "x-portkey-provider: bedrock" --peer-header "x-portkey-aws-access-key-id: x"
      --peer-header "x-portkey-aws-secret-access-key: x" --peer-header "x-portkey-aws-region: us-east-1")
  PEER_ARGS=(--peer-url http://127.0.0.1:18787/v1/chat/completions --peer-name "Portkey 1.15.2" --peer-pid "$PK"
      --peer-header "x-portkey-custom-host: http://127.0.0.1:18790" "${PH[@]}")
  PEER_STREAM=(--compare-url http://127.0.0.1:18787/v1/chat/completions --compare-door openai --compare-pid "$PK"
      --peer-header "x-portkey-custom-host: http://127.0.0.1:18791" "${PH[@]}")
fi
TOKENS="$BIN token --sub {user} --tenant {tenant} --app {app} --config $CONFIG --dev-key-file $OUT/dev-key.pem"
lt() { local scenario=$1; shift; $OUT/loadtest $scenario --progress off --token-cmd "$TOKENS" "$@"; }
echo "# bench-frontier at $(git rev-parse --short HEAD) $(git status --porcelain | grep -q . && echo '(with uncommitted changes)'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
if has frontier; then
  echo; echo "## frontier: gateway P's doors (production shape)$( [ "$PEER" = portkey ] && echo ' and Portkey')"
  lt frontier --url ws://127.0.0.1:18815/v1/ws --admin-url http://127.0.0.1:19815 --pid $P \
    --bedrock-url http://127.0.0.1:18790 --rates $RATES --duration $STEP --users 128 "${PEER_ARGS[@]}"
  echo; echo "## frontier: gateway M's OpenAI door (in memory)"
  lt frontier --url ws://127.0.0.1:18816/v1/ws --admin-url http://127.0.0.1:19816 --pid $M \
    --bedrock-url http://127.0.0.1:18790 --rates $RATES --duration $STEP --users 128 --paths /v1/chat/completions
fi
if has stream; then
  echo; echo "## 100 paced streams: /v1/ws on gateway S beside the direct call$( [ "$PEER" = portkey ] && echo ' and Portkey (SSE)')"
  lt overhead --streams 100 --rounds 4 --warmup 1 --url ws://127.0.0.1:18817/v1/ws --admin-url http://127.0.0.1:19817 \
    --pid $S --bedrock-url http://127.0.0.1:18791 "${PEER_STREAM[@]}"
  echo; echo "## 100 paced streams on /v1/ws of gateway S, back to back for 15 s: CPU per chunk frame, RSS at the end"
  lt capacity --sessions 0 --streaming-sessions 100 --stream-inflight 1 --stream-duration 15s --url ws://127.0.0.1:18817/v1/ws \
    --admin-url http://127.0.0.1:19817 --pid $S
  echo; echo "## the same on gateway R (in memory)"
  lt capacity --sessions 0 --streaming-sessions 100 --stream-inflight 1 --stream-duration 15s --url ws://127.0.0.1:18818/v1/ws \
    --admin-url http://127.0.0.1:19818 --pid $R
  echo; echo "## 100 paced streams: the OpenAI door (SSE) on gateway S beside /v1/ws and the direct call"
  lt overhead --streams 100 --rounds 4 --warmup 1 --door openai --url ws://127.0.0.1:18817/v1/ws \
    --admin-url http://127.0.0.1:19817 --pid $S --bedrock-url http://127.0.0.1:18791
fi
if has idle; then
  echo; echo "## 10,000 idle sessions on gateway S (heartbeats on)"
  lt capacity --sessions 10000 --streaming-sessions 0 --url ws://127.0.0.1:18817/v1/ws \
    --admin-url http://127.0.0.1:19817 --pid $S
  # 50,000 cannot be opened here: the open-file hard limit is 20,000 for the load tool and the gateway alike.
  n=$(( $(ulimit -Hn) - 1000 ))
  echo; echo "## $n idle sessions on gateway R (in memory; the most this machine's open-file limit allows)"
  lt capacity --sessions $n --streaming-sessions 0 --url ws://127.0.0.1:18818/v1/ws --admin-url http://127.0.0.1:19818 --pid $R
fi
if has soak; then
  # In memory: dynalite (one Node.js process) is not DynamoDB, and at this rate on this machine its queue, not the
  # gateway, would be what the soak measures (requests refused busy: the quota store's calls past their deadline).
  echo; echo "## soak: 200 streaming sessions and 200 requests/s on gateway R (in memory) for $SOAK"
  lt rate --rate 200 --ramp 0s --duration $SOAK --inflight 512 --users 64 --user-prefix soak-http \
    --url ws://127.0.0.1:18818/v1/ws --admin-url http://127.0.0.1:19818 --bedrock-url http://127.0.0.1:18791 --max-tokens 16 \
    > $OUT/soak-rate.md 2>&1 & RATE=$!
  lt soak --duration $SOAK --drop-every 5s --users 200 --url ws://127.0.0.1:18818/v1/ws \
    --admin-url http://127.0.0.1:19818 --pid $R
  wait $RATE; echo; echo "### the 200 requests/s beside it"; cat $OUT/soak-rate.md
fi
