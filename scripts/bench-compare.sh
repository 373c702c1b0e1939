#!/usr/bin/env bash
# Compares two sealrelay release binaries on protocol v1 over Redis, the relay's main path:
# forwarded requests per second and the relay's CPU per request, closed loop, alternating the
# binaries round by round on one Redis and one mock APNs (relay-bench mock), so drift of a
# shared machine falls on both alike. For "no worse than before" checks of a change.
#
#   scripts/bench-compare.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Needs redis-server and target/release/relay-bench (cargo build --release -p sealrelay-bench).
# Prints one line per run and the medians; everything it starts is stopped by process id.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 rounds=${3:-3}
RB=${RELAY_BENCH:-target/release/relay-bench}
[ -x "$RB" ] || { echo "bench-compare: $RB is missing (cargo build --release -p sealrelay-bench)" >&2; exit 2; }
work=$(mktemp -d)
log() { echo "bench-compare: $*" >&2; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
pids=()
cleanup() { stop_all; rm -rf "$work"; }
trap cleanup EXIT
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/redis.log" &
pids+=($!); wait_port "$rport"
aport=$(free_port)
"$RB" mock --state-dir "$work/apns" --port "$aport" --max-seconds 1800 >/dev/null 2>"$work/mock.log" &
pids+=($!); wait_port "$aport"
bench_relay_env "https://127.0.0.1:$aport" "$work/apns" com.example.cronstable
run() { # label binary
  local port admin pid
  port=$(free_port); admin=$(free_port)
  env -i PATH="$PATH" RELAY_LISTEN=127.0.0.1:$port RELAY_ADMIN_LISTEN=127.0.0.1:$admin \
    REDIS_URL=redis://127.0.0.1:$rport RELAY_ADMIN_SOCKET= "${BENCH_RELAY_ENV[@]}" \
    "$2" >"$work/relay.log" 2>&1 &
  pid=$!; pids+=("$pid")
  wait_url "http://127.0.0.1:$admin/readyz"
  "$RB" load --url "http://127.0.0.1:$port/" --duration 1 --max-requests 2000 --label warmup >/dev/null 2>&1 || true
  "$RB" load --url "http://127.0.0.1:$port/" --duration 8 --max-requests 400000 \
    --pid "relay=$pid" --label "$1" --out "$work/results.jsonl" >/dev/null
  stop "$pid"
  redis-cli -p "$rport" FLUSHALL >/dev/null
}
for r in $(seq 1 "$rounds"); do
  run "old@$r" "$old"
  run "new@$r" "$new"
done
python3 - "$work/results.jsonl" <<'PY'
import json, statistics, sys
by = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    kind = r["label"].split("@")[0]
    fwd = r.get("forwarded_per_s") or 0.0
    cpu = ((r.get("processes") or {}).get("relay") or {}).get("cpu_us_per_forwarded")
    print(f'{r["label"]}: {fwd:,.0f} forwarded/s, relay CPU {cpu:.1f} us per forwarded')
    by.setdefault(kind, []).append((fwd, cpu))
for kind, v in by.items():
    print(f'{kind}: median {statistics.median(f for f, _ in v):,.0f} forwarded/s, '
          f'relay CPU median {statistics.median(c for _, c in v):.1f} us per forwarded')
PY
