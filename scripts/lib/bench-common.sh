# Sourced by scripts/bench.sh and scripts/profile.sh (not run on its own): the helpers both
# use to start, find and stop what they run. Everything listens on 127.0.0.1 on a free port,
# and every process is stopped by the id the caller recorded in its array `pids`. The caller
# defines log().

stop_all() { # every process in pids: politely, then for good
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
stop() { # pid: stop one process we started and wait for it
  kill "$1" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_url() { # url
  for _ in $(seq 1 200); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.05; done
  log "$1 did not come up"; return 1
}
wait_port() { # port
  for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done
  log "port $1 did not open"; return 1
}

# bench_relay_env APNS_URL APNS_DIR TOPIC: sets BENCH_RELAY_ENV, the variables every benchmark
# relay runs with besides its addresses and store: no per-address bucket (one generator is
# one client address), device buckets that never decide, JSON logs at warn, a quick
# shutdown, and the mock APNs (its CA and a freshly generated auth key in APNS_DIR) for both
# environments.
bench_relay_env() {
  BENCH_RELAY_ENV=(
    RELAY_LOG_FORMAT=json RUST_LOG=warn
    RELAY_IP_RATE_CAPACITY=0 RELAY_RATE_CAPACITY=1000000 RELAY_RATE_REFILL_PER_S=10000
    RELAY_SHUTDOWN_DELAY_S=0 RELAY_SHUTDOWN_GRACE_S=2
    APNS_TEAM_ID=TEAM123456 APNS_KEY_ID=KEY1234567 APNS_TOPIC="$3"
    APNS_AUTH_KEY_FILE="$2/AuthKey.p8" APNS_CA_FILE="$2/ca.pem"
    APNS_ENVIRONMENT=production APNS_PRODUCTION_URL="$1" APNS_SANDBOX_URL="$1"
  )
}
