#!/usr/bin/env bash
# One command, one run: measures sealrelay against the limits of its own parts on this
# machine and writes BENCHMARKS.md and bench/latency-vs-load.png.
#
#   scripts/bench.sh
#
# Everything runs on 127.0.0.1: a redis-server on a free port, the fast mock APNs
# (relay-bench mock), bench-intake, and sealrelay replicas, all started and stopped here.
# Every load run is bounded by a duration AND a request count and stops by itself.
#
# Knobs (environment):
#   BENCH_ROUNDS=3            interleaved repetitions of the throughput/CPU measurements
#   BENCH_DURATION=8          seconds of each closed-loop measurement
#   BENCH_MAX_REQUESTS=400000 request cap of each measurement
#   BENCH_CONNECTIONS=64      keep-alive connections / streams in flight
#   BENCH_CURVE_ROUNDS=3      passes over the latency curve (median per point)
#   BENCH_CURVE_DURATION=10   seconds of each open-loop point of the latency curve
#   BENCH_CURVE_POINTS="0.1 0.25 0.5 0.75 0.9"   fractions of peak for the curve
#   BENCH_FEW_DEVICES=10000   first RSS point (distinct devices, after the warm-up's)
#   BENCH_MANY_DEVICES=1000000  second RSS point (distinct devices, run at full speed)
#   BENCH_MANY_MAX_S=400      time cap of the many-devices phase
#   BENCH_MEM_DEVICES=50000   devices for Redis memory per device
#   BENCH_RSS_WARM_REQUESTS=50000, BENCH_RSS_WARM_DEVICES=1000   warm-up before the RSS points
#   BENCH_SIGNED_FANOUT_RATE=20       100-target signed pushes per second (open loop)
#   BENCH_SIGNED_FANOUT_DURATION=3*BENCH_DURATION   seconds of the 100-target run
#   BENCH_SIGNED_FANOUT_CONNECTIONS=8 connections of the 100-target runs
#   BENCH_SIGNED_RT_PUSHES=2000       one-target signed pushes counted for Redis round trips
#   BENCH_SIGNED_PARTS_PREGEN=250000  pushes signed before the loop of each signed part's run
#   BENCH_SIGNED_VERIFY_ITERATIONS=3000 verifications per thread per round of the verify part
#   BENCH_SIGNED_RT_FANOUT_PUSHES=100 100-target signed pushes counted for Redis round trips
#   BENCH_MAILBOX_BODY_BYTES=256      envelope size of the mailbox phases
#   BENCH_MAILBOX_RT_REQUESTS=2000    envelope PUTs and lists counted for Redis round trips
#   BENCH_WATCH_RATE=1000             PUTs per second of the watch-latency run (open loop)
#   BENCH_WATCH_DURATION=10           seconds of the watch-latency run
#   BENCH_SIGNAL_RATE=1000            signal frames per second of the latency runs (open loop)
#   BENCH_SIGNAL_DURATION=10          seconds of each signal latency run
#   BENCH_SIGNAL_FRAME_BYTES=1024     frame size of the latency runs
#   BENCH_SIGNAL_PAIRS=20             mailboxes (pairs of sides) of the latency runs
#   BENCH_SIGNAL_CEILING_PAIRS=128    mailboxes of the relayed-bytes ceiling runs
#   BENCH_SIGNAL_CEILING_FRAME_BYTES=65536  frame size of the ceiling runs
#   BENCH_SIGNAL_CEILING_WINDOW=2     frames in flight per side in the ceiling runs
#   BENCH_ONLY=signed         run only the signed-push phases (with the v1 runs they are
#                             compared with); the report then goes to the run's directory
#   BENCH_ONLY=mailbox        run only the mailbox phases (their parts, PUT and list, round
#                             trips, watch latency across two replicas)
#   BENCH_ONLY=signal         run only the signal phases (latency on one and two replicas,
#                             relayed-bytes ceiling)
#   BENCH_ONLY=regions        run only the regions phase: three regions on loopback (each its
#                             own Redis, mock APNs and release relay) over links adding 40 ms
#                             each way (tests/it/regions.rs, regions_measured, built --release):
#                             duplicates, the hop's added latency, time to stop trying a killed
#                             region, alerts lost; the report goes to the run's directory
#   BENCH_REPORT=FILE         where the report goes (default BENCHMARKS.md; with BENCH_ONLY,
#                             the run's directory), the plot to bench/ next to it
#   BENCH_SKIP_BUILD=1        reuse the release binaries as they are
#   BENCH_OUT=bench/results   where raw results go (a timestamped directory)
#
# Binaries come from ${CARGO_TARGET_DIR:-target}/release, where the build puts them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ROUNDS=${BENCH_ROUNDS:-3}
DURATION=${BENCH_DURATION:-8}
MAXREQ=${BENCH_MAX_REQUESTS:-400000}
CONNS=${BENCH_CONNECTIONS:-64}
CURVE_DURATION=${BENCH_CURVE_DURATION:-10}
CURVE_ROUNDS=${BENCH_CURVE_ROUNDS:-3}
CURVE_POINTS=${BENCH_CURVE_POINTS:-0.1 0.25 0.5 0.75 0.9}
FEW=${BENCH_FEW_DEVICES:-10000}
MANY=${BENCH_MANY_DEVICES:-1000000}
MANY_MAX_S=${BENCH_MANY_MAX_S:-400}
MEMDEV=${BENCH_MEM_DEVICES:-50000}
RSS_WARM=${BENCH_RSS_WARM_REQUESTS:-50000}
RSS_WARM_DEVICES=${BENCH_RSS_WARM_DEVICES:-1000}
FANOUT_RATE=${BENCH_SIGNED_FANOUT_RATE:-20}
FANOUT_DURATION=${BENCH_SIGNED_FANOUT_DURATION:-$((DURATION * 3))}
FANOUT_CONNS=${BENCH_SIGNED_FANOUT_CONNECTIONS:-8}
RT_PUSHES=${BENCH_SIGNED_RT_PUSHES:-2000}
SG_PREGEN=${BENCH_SIGNED_PARTS_PREGEN:-250000}
SG_VERIFY_ITER=${BENCH_SIGNED_VERIFY_ITERATIONS:-3000}
RT_FANOUT_PUSHES=${BENCH_SIGNED_RT_FANOUT_PUSHES:-100}
MB_BODY=${BENCH_MAILBOX_BODY_BYTES:-256}
MB_RT=${BENCH_MAILBOX_RT_REQUESTS:-2000}
WATCH_RATE=${BENCH_WATCH_RATE:-1000}
WATCH_DURATION=${BENCH_WATCH_DURATION:-10}
SIG_RATE=${BENCH_SIGNAL_RATE:-1000}
SIG_DURATION=${BENCH_SIGNAL_DURATION:-10}
SIG_FRAME=${BENCH_SIGNAL_FRAME_BYTES:-1024}
SIG_PAIRS=${BENCH_SIGNAL_PAIRS:-20}
CEIL_PAIRS=${BENCH_SIGNAL_CEILING_PAIRS:-128}
CEIL_FRAME=${BENCH_SIGNAL_CEILING_FRAME_BYTES:-65536}
CEIL_WINDOW=${BENCH_SIGNAL_CEILING_WINDOW:-2}
ONLY=${BENCH_ONLY:-}
case "$ONLY" in
  ""|signed|mailbox|signal|regions) ;;
  *) echo "bench: BENCH_ONLY is empty (everything), signed, mailbox, signal or regions, not '$ONLY'" >&2; exit 2 ;;
esac
full() { [ -z "$ONLY" ]; }
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${BENCH_OUT:-bench/results}/$stamp
mkdir -p "$out"; out=$(cd "$out" && pwd)
results=$out/results.jsonl
: >"$results"

# The regions phase stands alone: its figures come from the measured test over release
# binaries (the relays, Redis servers, mock APNs and links are the test's own).
if [ "$ONLY" = regions ]; then
  echo "bench: regions phase (cargo nextest --release, test regions_measured)" >&2
  cargo nextest run --release --locked --no-capture --test it -E 'test(regions_measured)' 2>&1 \
    | grep -E '^(regions_measured:|  )' | grep -v '^  *(PASS|START)' | tee "$out/regions.txt"
  report=${BENCH_REPORT:-$out/report.md}
  { echo "# Regions phase ($stamp)"; echo; echo '```'; cat "$out/regions.txt"; echo '```'; } >"$report"
  echo "bench: regions report in $report" >&2
  exit 0
fi
log() { echo "bench: $*" >&2; }

# --- prerequisites -------------------------------------------------------------------
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v gnuplot >/dev/null || need_apt+=(gnuplot-nox)
command -v curl >/dev/null || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  log "building (release)"
  cargo build --release --locked -p sealrelay -p sealrelay-bench --bins
fi
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
bin=$target_dir/release
for b in sealrelay relay-bench bench-intake; do
  [ -x "$bin/$b" ] || { log "missing $bin/$b"; exit 1; }
done

# --- process bookkeeping: everything started here is stopped here ----------------------
# shellcheck source=scripts/lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
pids=()
trap stop_all EXIT INT TERM
RB=$bin/relay-bench
TOPIC=com.example.cronstable
SIGNER=ed25519:bench
# Admin sockets live in the run's directory (a short directory in /tmp when its path is too
# long for a socket address).
sockdir=$out
if [ ${#sockdir} -gt 80 ]; then sockdir=$(mktemp -d /tmp/sealrelay-bench.XXXXXX); fi

# --- shared services: Redis and the fast mock APNs -------------------------------------
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$out" --logfile "$out/redis.log" &
redis_pid=$!; pids+=("$redis_pid")
REDIS=redis://127.0.0.1:$redis_port
wait_port "$redis_port"
flush() { redis-cli -p "$redis_port" FLUSHALL >/dev/null; }

apns_port=$(free_port)
"$RB" mock --state-dir "$out/apns" --port "$apns_port" --max-seconds 3600 >"$out/mock.out" 2>"$out/mock.log" &
mock_pid=$!; pids+=("$mock_pid")
wait_port "$apns_port"
APNS=https://127.0.0.1:$apns_port
bench_relay_env "$APNS" "$out/apns" "$TOPIC"

start_relay() { # name [redis-url] [admin-socket] -> sets relay_pid, relay_url
  # Without an admin socket the relay gets none (RELAY_ADMIN_SOCKET empty), so replicas
  # never share the default path. With mb=1 in the environment of the call, the relay also
  # serves the bench's mailbox app (with signal) and holds up to 100,000 envelopes per
  # direction, so neither the app list nor the envelope cap decides a mailbox phase.
  local name=$1 redis=${2:-} sock=${3:-} port aport
  port=$(free_port); aport=$(free_port)
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    RELAY_LISTEN=127.0.0.1:$port RELAY_ADMIN_LISTEN=127.0.0.1:$aport \
    ${redis:+REDIS_URL=$redis} RELAY_ADMIN_SOCKET="$sock" \
    ${mb:+RELAY_APPS=bench:signal RELAY_MAILBOX_MAX_ENVELOPES=100000} \
    ${percore:+RELAY_RUNTIME=per-core} \
    RELAY_REPLICA_NAME="$name" "${BENCH_RELAY_ENV[@]}" \
    "$bin/sealrelay" >"$out/relay-$name.log" 2>&1 &
  relay_pid=$!; pids+=("$relay_pid")
  relay_url=http://127.0.0.1:$port/
  wait_url "http://127.0.0.1:$aport/readyz"
}

# A short unrecorded warm-up (connections, TLS to the mock, script load).
warm() { "$RB" load "$@" --duration 1 --max-requests 2000 --label warmup >/dev/null 2>&1 || true; }

# --- signed pushes: one signer key for the run, enrolled on each relay that takes them -----
signer_key=$out/signer.pem
env -i PATH="$PATH" HOME="${HOME:-/tmp}" "$bin/sealrelay" keygen --out "$signer_key" \
  >"$out/signer.pub" 2>>"$out/enrol.log"
enrol() { # admin-socket: enrol the run's signer for the bench's topic with the binary itself
  for _ in $(seq 1 200); do [ -S "$1" ] && break; sleep 0.05; done
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" "$bin/sealrelay" admin --socket "$1" \
    signers add "$SIGNER" --key "$signer_key" --topic "$TOPIC" >>"$out/enrol.log" 2>&1 \
    || { log "enrolling $SIGNER over $1 failed (see $out/enrol.log)"; exit 1; }
}
SIGNED=("$RB" signed --key "$signer_key" --key-id "$SIGNER")
warm_signed() { "${SIGNED[@]}" "$@" --duration 1 --max-requests 2000 --label warmup >/dev/null 2>&1 || true; }
# Mailbox and signal warm-ups: fresh mailboxes of their own (the salt is the clock).
warm_mb() { "$RB" mailbox "$@" --op put --body-bytes "$MB_BODY" --duration 1 --max-requests 2000 \
  --label warmup >/dev/null 2>&1 || true; }
warm_signal() { "$RB" signal "$@" --pairs "$SIG_PAIRS" --rate "$SIG_RATE" --duration 2 \
  --max-requests 1000000 --label warmup >/dev/null 2>&1 || true; }

# --- rounds: (a) the parts alone, (b) sealrelay embedded, (c) sealrelay on Redis -----------
# The machine is shared and its speed drifts from minute to minute, so every measurement runs
# ROUNDS times, interleaved (parts, relay, parts, relay, ...), and the report takes the median
# of each figure across rounds and shows the spread.
for round in $(seq 1 "$ROUNDS"); do
log "round $round of $ROUNDS"
if full; then
log "part A: HTTP intake that parses the envelope (bench-intake)"
intake_port=$(free_port)
"$bin/bench-intake" --port "$intake_port" --max-seconds 600 >/dev/null &
intake_pid=$!; pids+=("$intake_pid")
wait_port "$intake_port"
warm --url "http://127.0.0.1:$intake_port/" --connections "$CONNS"
"$RB" load --url "http://127.0.0.1:$intake_port/" --connections "$CONNS" \
  --duration "$DURATION" --max-requests "$MAXREQ" --pid "intake=$intake_pid" \
  --label "part-intake@$round" --out "$results" >/dev/null
stop "$intake_pid"

log "part B: Redis running policy_admit.lua via EVALSHA"
flush
"$RB" redis --redis-url "$REDIS" --concurrency "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --label "part-redis@$round" --out "$results" >/dev/null
flush

fi
if want signed; then
log "part C: mock APNs over HTTP/2 (relay-bench as the relay's client)"
"$RB" apns --url "$APNS" --ca "$out/apns/ca.pem" --concurrency "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pid "mock=$mock_pid" --label "part-apns@$round" --out "$results" >/dev/null

# The parts of a one-target signed push, each alone: its HTTP part (bench-intake reads,
# parses and canonicalises /v2/pushes and renders the receipt), one Ed25519 verification
# (ring as the relay calls it, one thread per core) and its three store calls (the relay's
# own Store driving receipt_begin, admit and receipt_update on Redis). With part C above,
# the report compares the signed run with their combined limit.
log "signed part A: HTTP intake of /v2/pushes alone (bench-intake)"
intake_port=$(free_port)
"$bin/bench-intake" --port "$intake_port" --max-seconds 600 >/dev/null &
intake_pid=$!; pids+=("$intake_pid")
wait_port "$intake_port"
warm_signed --url "http://127.0.0.1:$intake_port/" --connections "$CONNS"
"${SIGNED[@]}" --url "http://127.0.0.1:$intake_port/" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pregen "$SG_PREGEN" --pid "intake=$intake_pid" \
  --label "part-sg-intake@$round" --out "$results" >/dev/null
stop "$intake_pid"

log "signed part V: Ed25519 verification alone (relay-bench verify, every core)"
"$RB" verify --threads 0 --rounds 3 --iterations "$SG_VERIFY_ITER" \
  --label "part-sg-verify@$round" --out "$results" >/dev/null 2>>"$out/verify.log"

log "signed part S: the store calls of a one-target signed push alone (relay-bench signed-redis)"
flush
"$RB" signed-redis --redis-url "$REDIS" --concurrency "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pregen "$SG_PREGEN" --label "part-sg-redis@$round" --out "$results" >/dev/null
flush
fi

if full; then
log "sealrelay, embedded store"
start_relay mem
warm --url "$relay_url" --connections "$CONNS"
"$RB" load --url "$relay_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pid "relay=$relay_pid" --pid "mock=$mock_pid" \
  --label "relay-memory@$round" --out "$results" >/dev/null
stop "$relay_pid"
fi

if full || [ "$ONLY" = signed ]; then
log "sealrelay on Redis, one replica"
flush
start_relay r1 "$REDIS" "$sockdir/admin-r1.sock"; r1_pid=$relay_pid; r1_url=$relay_url
enrol "$sockdir/admin-r1.sock"
warm --url "$r1_url" --connections "$CONNS"
"$RB" load --url "$r1_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pid "relay=$r1_pid" --pid "mock=$mock_pid" --redis-url "$REDIS" \
  --label "relay-redis-1@$round" --out "$results" >/dev/null

# Right after v1 on the same replica, the same connections and duration: signed pushes of
# one target each. Bodies are signed before the timed loop: as many as v1 forwarded in this
# round plus a quarter (a signed push does all of v1's work and more); any past those are
# signed in the loop, and the report says how many.
log "sealrelay on Redis, one replica, signed pushes (/v2/pushes, one target each)"
pregen=$(python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]
r=[x for x in r if x["label"]==sys.argv[2]][-1]
print(min(int(sys.argv[4]), int(r["forwarded_per_s"]*float(sys.argv[3])*1.25)+1000))' \
  "$results" "relay-redis-1@$round" "$DURATION" "$MAXREQ")
warm_signed --url "$r1_url" --connections "$CONNS"
"${SIGNED[@]}" --url "$r1_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pregen "$pregen" --pid "relay=$r1_pid" --pid "mock=$mock_pid" \
  --redis-url "$REDIS" --label "signed-1@$round" --out "$results" >/dev/null

if full; then

log "sealrelay on Redis, one replica, daemon-shaped mix (bursts of 100 devices, 3 cluster nodes)"
"$RB" load --url "$r1_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --burst 100 --dup 3 --devices 20000 \
  --pid "relay=$r1_pid" --pid "mock=$mock_pid" --redis-url "$REDIS" \
  --label "relay-redis-1-mix@$round" --out "$results" >/dev/null

log "sealrelay on Redis, two replicas"
start_relay r2 "$REDIS"; r2_pid=$relay_pid; r2_url=$relay_url
warm --url "$r2_url" --connections "$CONNS"
"$RB" load --url "$r1_url" --url "$r2_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pid "relay=$r1_pid" --pid "relay2=$r2_pid" --pid "mock=$mock_pid" \
  --redis-url "$REDIS" --label "relay-redis-2@$round" --out "$results" >/dev/null
stop "$r2_pid"
fi
stop "$r1_pid"

if full; then
# The same load on one replica running a relay per core (RELAY_RUNTIME=per-core): reported
# beside the default runtime's figures, which the targets are measured on.
log "sealrelay on Redis, one replica, a relay per core (RELAY_RUNTIME=per-core)"
flush
percore=1 start_relay pc "$REDIS" "$sockdir/admin-pc.sock"; pc_pid=$relay_pid; pc_url=$relay_url
enrol "$sockdir/admin-pc.sock"
warm --url "$pc_url" --connections "$CONNS"
"$RB" load --url "$pc_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pid "relay=$pc_pid" --pid "mock=$mock_pid" --redis-url "$REDIS" \
  --label "relay-redis-1-percore@$round" --out "$results" >/dev/null
# Signed pushes of one target on the same replica right after, as on the default runtime.
log "sealrelay on Redis, one replica, a relay per core, signed pushes (one target each)"
warm_signed --url "$pc_url" --connections "$CONNS"
"${SIGNED[@]}" --url "$pc_url" --connections "$CONNS" --duration "$DURATION" \
  --max-requests "$MAXREQ" --pregen "$pregen" --pid "relay=$pc_pid" --pid "mock=$mock_pid" \
  --redis-url "$REDIS" --label "signed-1-percore@$round" --out "$results" >/dev/null
stop "$pc_pid"
fi
fi

# Mailboxes: envelope PUT and list against the limit of their parts, the HTTP intake alone
# (bench-intake answering the same requests without a store) and Redis running the relay's
# mailbox script for the same requests. Each run spreads its requests over enough mailboxes
# (claimed, and for lists filled with one envelope, before the timed loop) that none gets
# more than 100 PUTs (bucket: 120, then 2/s) or 200 lists (240, then 4/s).
if want mailbox; then
log "mailbox part A: HTTP intake alone (bench-intake), envelope PUT and list"
intake_port=$(free_port)
"$bin/bench-intake" --port "$intake_port" --max-seconds 600 --list-envelopes 1 \
  --envelope-bytes "$MB_BODY" >/dev/null &
intake_pid=$!; pids+=("$intake_pid")
wait_port "$intake_port"
warm_mb --url "http://127.0.0.1:$intake_port/" --connections "$CONNS"
for op in put list; do
  per=100; [ "$op" = list ] && per=200
  "$RB" mailbox --url "http://127.0.0.1:$intake_port/" --op "$op" --per-mailbox "$per" \
    --body-bytes "$MB_BODY" --connections "$CONNS" --duration "$DURATION" --max-requests "$MAXREQ" \
    --pid "intake=$intake_pid" --label "part-mb-intake-$op@$round" --out "$results" >/dev/null
done
stop "$intake_pid"

log "mailbox part B: Redis running mailbox.lua via EVALSHA, envelope PUT and list"
flush
for op in put list; do
  per=100; [ "$op" = list ] && per=200
  "$RB" mailbox-redis --redis-url "$REDIS" --op "$op" --per-mailbox "$per" --body-bytes "$MB_BODY" \
    --concurrency "$CONNS" --duration "$DURATION" --max-requests "$MAXREQ" \
    --label "part-mb-redis-$op@$round" --out "$results" >/dev/null
done
flush

# One fresh replica on Redis, envelope PUTs then lists, labelled mailbox-<kind><op>; with
# percore=1 in the environment of the call, the replica runs a relay per core.
mb_runs() { # name label-infix
  local m_pid m_url
  mb=1 start_relay "$1" "$REDIS"; m_pid=$relay_pid; m_url=$relay_url
  warm_mb --url "$m_url" --connections "$CONNS"
  for op in put list; do
    per=100; [ "$op" = list ] && per=200
    "$RB" mailbox --url "$m_url" --op "$op" --per-mailbox "$per" --body-bytes "$MB_BODY" \
      --connections "$CONNS" --duration "$DURATION" --max-requests "$MAXREQ" \
      --pid "relay=$m_pid" --redis-url "$REDIS" --label "mailbox-$2$op@$round" --out "$results" >/dev/null
  done
  stop "$m_pid"
  flush
}
log "sealrelay on Redis, one replica, mailboxes: envelope PUT and list"
mb_runs mb1 ""
# The same requests to one replica running a relay per core (RELAY_RUNTIME=per-core),
# reported beside the default runtime's.
log "sealrelay on Redis, one replica, a relay per core, mailboxes: envelope PUT and list"
percore=1 mb_runs mbpc percore-
fi

# Signal: the relayed-bytes ceiling of one replica, on the embedded store and on Redis.
# Many pairs of sides, large frames, closed loop per side with a few frames in flight, each
# side paced under its frame bucket (which limits frames, not bytes).
if want signal; then
for store in mem redis; do
  log "signal: relayed-bytes ceiling of one replica ($store store), $CEIL_PAIRS pairs, frames of $CEIL_FRAME bytes"
  if [ "$store" = redis ]; then
    flush; mb=1 start_relay "sig-ceil-$store" "$REDIS"; ropt=(--redis-url "$REDIS")
  else
    mb=1 start_relay "sig-ceil-$store"; ropt=()
  fi
  c_pid=$relay_pid; c_url=$relay_url
  warm_signal --url "$c_url"
  "$RB" signal --url "$c_url" --pairs "$CEIL_PAIRS" --frame-bytes "$CEIL_FRAME" \
    --window "$CEIL_WINDOW" --duration "$DURATION" --max-requests "$MAXREQ" --pid "relay=$c_pid" \
    "${ropt[@]}" --label "signal-ceiling-$store@$round" --out "$results" >/dev/null
  stop "$c_pid"
done
flush
fi
done

# --- signed pushes of 100 targets, and Redis round trips per signed push -------------------
if want signed; then
log "signed pushes of 100 targets at $FANOUT_RATE/s (open loop, $FANOUT_DURATION s), fresh replica on Redis"
flush
start_relay signed "$REDIS" "$sockdir/admin-signed.sock"; s_pid=$relay_pid; s_url=$relay_url
enrol "$sockdir/admin-signed.sock"
warm_signed --url "$s_url" --connections "$CONNS"
"${SIGNED[@]}" --url "$s_url" --connections "$FANOUT_CONNS" --targets 100 --duration 1 \
  --max-requests 20 --label warmup >/dev/null 2>&1 || true
n=$(python3 -c "print(int($FANOUT_RATE*$FANOUT_DURATION*1.05)+10)")
"${SIGNED[@]}" --url "$s_url" --connections "$FANOUT_CONNS" --targets 100 --rate "$FANOUT_RATE" \
  --duration "$FANOUT_DURATION" --max-requests "$n" --pid "relay=$s_pid" --pid "mock=$mock_pid" \
  --redis-url "$REDIS" --label "signed-100" --out "$results" >/dev/null
log "Redis round trips: $RT_PUSHES signed pushes of one target, $RT_FANOUT_PUSHES of 100 targets"
"${SIGNED[@]}" --url "$s_url" --connections "$CONNS" --duration 120 --max-requests "$RT_PUSHES" \
  --pid "relay=$s_pid" --redis-url "$REDIS" --label "signed-rt-1" --out "$results" >/dev/null
"${SIGNED[@]}" --url "$s_url" --connections "$FANOUT_CONNS" --targets 100 --duration 120 \
  --max-requests "$RT_FANOUT_PUSHES" --pid "relay=$s_pid" --redis-url "$REDIS" \
  --label "signed-rt-100" --out "$results" >/dev/null
stop "$s_pid"
fi

# --- mailboxes: Redis round trips per request, watch latency across two replicas ----------
if want mailbox; then
log "mailbox Redis round trips: $MB_RT envelope PUTs and $MB_RT lists (fresh replica on Redis)"
flush
mb=1 start_relay mbrt "$REDIS"; a_pid=$relay_pid; a_url=$relay_url
warm_mb --url "$a_url" --connections "$CONNS"
for op in put list; do
  "$RB" mailbox --url "$a_url" --op "$op" --body-bytes "$MB_BODY" --connections "$CONNS" \
    --duration 120 --max-requests "$MB_RT" --pid "relay=$a_pid" --redis-url "$REDIS" \
    --label "mailbox-rt-$op" --out "$results" >/dev/null
done
log "watch latency: watches on replica A, PUTs on replica B at $WATCH_RATE/s for $WATCH_DURATION s"
mb=1 start_relay mbB "$REDIS"; b_pid=$relay_pid; b_url=$relay_url
warm_mb --url "$b_url" --connections 16
n=$(python3 -c "print(int($WATCH_RATE*$WATCH_DURATION*1.05)+10)")
"$RB" watch --url "$b_url" --watch-url "$a_url" --rate "$WATCH_RATE" --duration "$WATCH_DURATION" \
  --max-requests "$n" --body-bytes "$MB_BODY" --connections 16 \
  --pid "relay=$a_pid" --pid "relay2=$b_pid" --redis-url "$REDIS" \
  --label "watch-2" --out "$results" >/dev/null
stop "$b_pid"; stop "$a_pid"
flush
fi

# --- signal: frame latency within one replica and across two -------------------------------
if want signal; then
n=$(python3 -c "print(int($SIG_RATE*$SIG_DURATION*1.05)+10)")
sig_lat() { # label url [peer-url] [redis]: one open-loop latency run
  local label=$1 url=$2 peer=${3:-} r=${4:-}
  "$RB" signal --url "$url" ${peer:+--peer-url "$peer"} --pairs "$SIG_PAIRS" --frame-bytes "$SIG_FRAME" \
    --rate "$SIG_RATE" --duration "$SIG_DURATION" --max-requests "$n" "${sig_pids[@]}" \
    ${r:+--redis-url "$r"} --label "$label" --out "$results" >/dev/null
}
log "signal latency, one replica, embedded store: $SIG_RATE frames/s of $SIG_FRAME bytes over $SIG_PAIRS pairs"
mb=1 start_relay sig-mem; a_pid=$relay_pid; a_url=$relay_url
warm_signal --url "$a_url"
sig_pids=(--pid "relay=$a_pid")
sig_lat signal-local-mem "$a_url"
stop "$a_pid"
log "signal latency on Redis: one replica, then across two (primary on A, companion on B)"
flush
mb=1 start_relay sigA "$REDIS"; a_pid=$relay_pid; a_url=$relay_url
mb=1 start_relay sigB "$REDIS"; b_pid=$relay_pid; b_url=$relay_url
warm_signal --url "$a_url"; warm_signal --url "$a_url" --peer-url "$b_url"
sig_pids=(--pid "relay=$a_pid")
sig_lat signal-local-redis "$a_url" "" "$REDIS"
sig_pids=(--pid "relay=$a_pid" --pid "relay2=$b_pid")
sig_lat signal-cross "$a_url" "$b_url" "$REDIS"
stop "$b_pid"; stop "$a_pid"
flush
fi

if full; then

# --- latency versus load, on a fresh replica -----------------------------------------------
flush
start_relay r1 "$REDIS"; r1_pid=$relay_pid; r1_url=$relay_url
warm --url "$r1_url" --connections "$CONNS"
log "latency versus load (open loop), sealrelay on Redis and the mock APNs alone"
peak=$(python3 -c 'import json,statistics,sys
print(statistics.median(r["rps"] for r in map(json.loads, open(sys.argv[1]))
                        if r["label"].split("@")[0]=="relay-redis-1"))' "$results")
# CURVE_ROUNDS passes over the points (relay then mock alone at each); the report takes the
# median of each percentile across passes.
for pass in $(seq 1 "$CURVE_ROUNDS"); do
for f in $CURVE_POINTS; do
  rate=$(python3 -c "print(round($peak*$f))")
  [ "$rate" -lt 1 ] && rate=1
  n=$(python3 -c "print(int($rate*$CURVE_DURATION*1.05)+10)")
  "$RB" load --url "$r1_url" --connections "$CONNS" --rate "$rate" --duration "$CURVE_DURATION" \
    --max-requests "$n" --pid "relay=$r1_pid" --redis-url "$REDIS" \
    --label "curve-relay-$f@$pass" --out "$results" >/dev/null
  "$RB" apns --url "$APNS" --ca "$out/apns/ca.pem" --concurrency "$CONNS" --rate "$rate" \
    --duration "$CURVE_DURATION" --max-requests "$n" --label "curve-apns-$f@$pass" --out "$results" >/dev/null
done
done

stop "$r1_pid"

# --- memory: relay RSS from FEW to MANY devices, Redis bytes per device -------------------
log "relay RSS at $FEW then $MANY distinct devices on Redis (fresh replica)"
flush
start_relay rss "$REDIS"
# Warm-up first, over a pool of only RSS_WARM_DEVICES devices: the runtime's buffers,
# allocator pages and connection pools reach their working size under load, so the two
# points below differ by the number of distinct devices, which is what the target is about.
"$RB" load --url "$relay_url" --connections "$CONNS" --duration 120 --max-requests "$RSS_WARM" \
  --devices "$RSS_WARM_DEVICES" --pid "relay=$relay_pid" --salt 0 \
  --label "rss-warm" --out "$results" >/dev/null
"$RB" load --url "$relay_url" --connections "$CONNS" --duration 120 --max-requests "$FEW" \
  --pid "relay=$relay_pid" --redis-url "$REDIS" --salt 1 \
  --label "rss-few" --out "$results" >/dev/null
"$RB" load --url "$relay_url" --connections "$CONNS" --duration "$MANY_MAX_S" \
  --max-requests "$((MANY - FEW))" --pid "relay=$relay_pid" --redis-url "$REDIS" --salt 2 \
  --label "rss-many" --out "$results" >/dev/null
redis-cli -p "$redis_port" DBSIZE >"$out/dbsize-many.txt"
stop "$relay_pid"

log "Redis memory per device with one live alert id"
flush
"$RB" redis --redis-url "$REDIS" --concurrency "$CONNS" --duration 120 --max-requests "$MEMDEV" \
  --memory --label redis-memory --out "$results" >/dev/null
flush
fi

stop "$mock_pid"; stop "$redis_pid"

# --- machine facts, report, plot -----------------------------------------------------------
{
  echo "## nproc"; nproc
  echo "## lscpu"; lscpu | grep -E '^(Model name|Architecture|CPU\(s\)|Thread|Core|Socket|CPU max MHz|CPU MHz|L2|L3|Hypervisor)' || true
  echo "## free -m"; free -m
  echo "## kernel"; uname -sr
  echo "## redis"; redis-server --version
  echo "## rustc"; rustc --version
  echo "## git"; git rev-parse --short HEAD 2>/dev/null || true; git status --short src | head -5 || true
} >"$out/machine.txt" 2>&1
report=${BENCH_REPORT:-}
if [ -z "$report" ]; then
  if full; then report=BENCHMARKS.md; else report=$out/BENCHMARKS.md; fi
fi
python3 bench/report.py "$out" "$report"
log "raw results: $out; report: $report"
