#!/usr/bin/env bash
# Where the relay's CPU goes, per surface: records a CPU profile of one sealrelay replica on
# Redis under each surface's closed-loop load (the same loads as scripts/bench.sh), renders a
# flame graph per surface, and writes a table of the relay's microseconds per request by
# where they are spent (kernel send and receive, the Redis client, HTTP, TLS, JSON, the
# runtime, the allocator, the relay's own code).
#
#   scripts/profile.sh [SURFACE...]      surfaces: v1 signed mailbox-put signal (default: all)
#
# Writes bench/flame-<LABEL>-<surface>.svg and bench/profile-<LABEL>.md (LABEL from
# PROFILE_LABEL, default the short commit). Each surface runs three times: without the
# profiler, for the relay's CPU per request; under `perf record` (cpu-clock samples, DWARF
# call graphs), for the shares; and under `perf stat`, for the system calls per request. The
# profiler's own cost is kept out of the microseconds that way.
#
# Knobs (environment):
#   PROFILE_LABEL=<commit>    name of the outputs (e.g. before, after)
#   PROFILE_DURATION=8        seconds of each load run
#   PROFILE_FREQ=997          samples per second per CPU
#   PROFILE_CONNECTIONS=64    connections (or streams) in flight
#   PROFILE_SKIP_BUILD=1      reuse the release binaries as they are
#   PROFILE_OUT=DIR           where the raw profiles go (default a temporary directory,
#                             removed at the end; set it to keep perf.data and stacks)
#   PROFILE_RELAY_ENV='RELAY_WORKER_THREADS=1 ...'
#                             settings the relay runs with besides the benchmark's (RELAY_*
#                             variables only; the report's header names them)
#
# Needs perf (linux-perf), redis-server, and inferno's collapse and flamegraph tools
# (installed with cargo into ~/.cache/sealrelay-profile-tools when missing). Everything runs
# on 127.0.0.1, bounded by a duration and a request count, and is stopped by process id.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

DURATION=${PROFILE_DURATION:-8}
FREQ=${PROFILE_FREQ:-997}
CONNS=${PROFILE_CONNECTIONS:-64}
MAXREQ=400000
LABEL=${PROFILE_LABEL:-$(git rev-parse --short HEAD)}
case "$LABEL" in *[!A-Za-z0-9._-]*|"") echo "profile: PROFILE_LABEL may hold letters, digits, '.', '_' and '-', not '$LABEL'" >&2; exit 2 ;; esac
surfaces=("$@")
[ ${#surfaces[@]} -gt 0 ] || surfaces=(v1 signed mailbox-put signal)
for s in "${surfaces[@]}"; do
  case "$s" in v1|signed|mailbox-put|signal) ;; *) echo "profile: surfaces are v1, signed, mailbox-put and signal, not '$s'" >&2; exit 2 ;; esac
done
log() { echo "profile: $*" >&2; }
read -r -a relay_env <<<"${PROFILE_RELAY_ENV:-}"
for v in "${relay_env[@]}"; do
  [[ "$v" =~ ^RELAY_[A-Z0-9_]+=[^[:space:]]*$ ]] || { echo "profile: PROFILE_RELAY_ENV holds RELAY_NAME=value settings, not '$v'" >&2; exit 2; }
done

# --- prerequisites -------------------------------------------------------------------
need_apt=()
command -v perf >/dev/null || need_apt+=(linux-perf)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v curl >/dev/null || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
tools=$HOME/.cache/sealrelay-profile-tools
if ! [ -x "$tools/bin/inferno-flamegraph" ]; then
  log "installing inferno into $tools"
  cargo install --locked --quiet --root "$tools" inferno --version 0.12.8
fi
if [ -z "${PROFILE_SKIP_BUILD:-}" ]; then
  log "building (release)"
  cargo build --release --locked -p sealrelay -p sealrelay-bench --bins
fi
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
bin=$target_dir/release
for b in sealrelay relay-bench; do
  [ -x "$bin/$b" ] || { log "missing $bin/$b"; exit 1; }
done

if [ -n "${PROFILE_OUT:-}" ]; then
  out=$PROFILE_OUT/$LABEL; mkdir -p "$out"; keep=1
else
  out=$(mktemp -d /tmp/sealrelay-profile.XXXXXX); keep=
fi

# shellcheck source=scripts/lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
pids=()
cleanup() { stop_all; [ -n "$keep" ] || rm -rf "$out"; }
trap cleanup EXIT INT TERM
RB=$bin/relay-bench
# System calls counted during the profiled run (per request in the report).
SYSCALL_EVENTS=raw_syscalls:sys_enter
for c in write writev sendto sendmsg read readv recvfrom recvmsg epoll_wait futex; do
  SYSCALL_EVENTS+=,syscalls:sys_enter_$c
done
TOPIC=com.example.cronstable
SIGNER=ed25519:bench

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$out" --logfile "$out/redis.log" &
pids+=($!)
REDIS=redis://127.0.0.1:$redis_port
wait_port "$redis_port"
flush() { redis-cli -p "$redis_port" FLUSHALL >/dev/null; }
apns_port=$(free_port)
"$RB" mock --state-dir "$out/apns" --port "$apns_port" --max-seconds 3600 >"$out/mock.out" 2>"$out/mock.log" &
pids+=($!)
wait_port "$apns_port"
APNS=https://127.0.0.1:$apns_port
bench_relay_env "$APNS" "$out/apns" "$TOPIC"
sock=$out/admin.sock
if [ ${#sock} -gt 90 ]; then sock=$(mktemp -d /tmp/sealrelay-profile-sock.XXXXXX)/admin.sock; fi
signer_key=$out/signer.pem
rm -f "$signer_key" "$out/results.jsonl"
"$bin/sealrelay" keygen --out "$signer_key" >/dev/null 2>"$out/enrol.log" \
  || { log "keygen failed: $(cat "$out/enrol.log")"; exit 1; }

start_relay() { # surface -> relay_pid, relay_url (one replica on Redis, as scripts/bench.sh runs it)
  local port aport
  port=$(free_port); aport=$(free_port)
  rm -f "$sock"
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    RELAY_LISTEN=127.0.0.1:$port RELAY_ADMIN_LISTEN=127.0.0.1:$aport REDIS_URL="$REDIS" \
    RELAY_ADMIN_SOCKET="$sock" RELAY_APPS=bench:signal RELAY_MAILBOX_MAX_ENVELOPES=100000 \
    RELAY_REPLICA_NAME="profile-$1" "${BENCH_RELAY_ENV[@]}" ${relay_env[@]+"${relay_env[@]}"} \
    "$bin/sealrelay" >"$out/relay-$1.log" 2>&1 &
  relay_pid=$!; pids+=("$relay_pid")
  relay_url=http://127.0.0.1:$port/
  wait_url "http://127.0.0.1:$aport/readyz"
  if [ "$1" = signed ]; then
    for _ in $(seq 1 200); do [ -S "$sock" ] && break; sleep 0.05; done
    "$bin/sealrelay" admin --socket "$sock" signers add "$SIGNER" --key "$signer_key" \
      --topic "$TOPIC" >>"$out/enrol.log" 2>&1 || { log "enrolling the signer failed (see $out/enrol.log)"; exit 1; }
  fi
}

load() { # surface duration label: the surface's closed-loop load against relay_url
  local s=$1 d=$2 label=$3
  case "$s" in
    v1) "$RB" load --url "$relay_url" --connections "$CONNS" --duration "$d" --max-requests "$MAXREQ" \
          --pid "relay=$relay_pid" --label "$label" --out "$out/results.jsonl" ;;
    signed) "$RB" signed --key "$signer_key" --key-id "$SIGNER" --url "$relay_url" --connections "$CONNS" \
          --duration "$d" --max-requests "$MAXREQ" --pregen 60000 --pid "relay=$relay_pid" \
          --label "$label" --out "$out/results.jsonl" ;;
    mailbox-put) "$RB" mailbox --url "$relay_url" --op put --per-mailbox 100 --body-bytes 256 \
          --connections "$CONNS" --duration "$d" --max-requests "$MAXREQ" --pid "relay=$relay_pid" \
          --label "$label" --out "$out/results.jsonl" ;;
    signal) "$RB" signal --url "$relay_url" --pairs 128 --frame-bytes 65536 --window 2 \
          --duration "$d" --max-requests "$MAXREQ" --pid "relay=$relay_pid" \
          --label "$label" --out "$out/results.jsonl" ;;
  esac >/dev/null
}

mkdir -p bench
profiled=()
for s in "${surfaces[@]}"; do
  log "$s: warm-up and a run without the profiler"
  flush
  start_relay "$s"
  load "$s" 1 "warmup-$s" || true
  load "$s" "$DURATION" "plain-$s"
  log "$s: the same load under perf record"
  perf record -e cpu-clock -F "$FREQ" --call-graph dwarf,16384 -p "$relay_pid" \
    -o "$out/perf-$s.data" >"$out/perf-$s.log" 2>&1 </dev/null &
  perf_pid=$!; pids+=("$perf_pid")
  sleep 0.5
  load "$s" "$DURATION" "profiled-$s"
  kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" || true
  log "$s: the same load with its system calls counted"
  perf stat -x, -o "$out/syscalls-$s.csv" -p "$relay_pid" -e "$SYSCALL_EVENTS" 2>/dev/null &
  stat_pid=$!; pids+=("$stat_pid")
  sleep 0.5
  load "$s" "$DURATION" "counted-$s"
  kill -INT "$stat_pid" 2>/dev/null || true; wait "$stat_pid" || true
  stop "$relay_pid"
  log "$s: stacks and flame graph"
  { perf script -i "$out/perf-$s.data" 2>/dev/null \
    | "$tools/bin/inferno-collapse-perf" --all >"$out/stacks-$s.folded"; } || true
  if [ ! -s "$out/stacks-$s.folded" ]; then
    # perf exited without samples (seen under the mailbox load): say so, go on with the rest.
    log "$s: perf recorded no samples (see $out/perf-$s.log); no profile of it this run"
    continue
  fi
  profiled+=("$s")
  "$tools/bin/inferno-flamegraph" --title "sealrelay $LABEL: $s (one replica on Redis, closed loop)" \
    --countname ns --width 1400 --minwidth 0.5 <"$out/stacks-$s.folded" >"bench/flame-$LABEL-$s.svg"
done

[ ${#profiled[@]} -gt 0 ] || { log "no surface was profiled"; exit 1; }
python3 bench/profile_report.py --label "$LABEL" --results "$out/results.jsonl" \
  --stacks-dir "$out" --surfaces "${profiled[@]}" --relay-env "${PROFILE_RELAY_ENV:-}" >"bench/profile-$LABEL.md"
log "wrote bench/profile-$LABEL.md and bench/flame-$LABEL-*.svg"
