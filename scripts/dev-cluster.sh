#!/usr/bin/env bash
# A local stack for demos and manual tests, all on 127.0.0.1: one redis-server, a mock APNs
# (production and sandbox, HTTP/2 over TLS, checking the provider JWT), and N sealrelay
# replicas sharing the Redis, each on its own ports.
#
#   scripts/dev-cluster.sh up [N]     # default N=3; prints the URLs
#   scripts/dev-cluster.sh status
#   scripts/dev-cluster.sh down
#
# State (certificates, auth key, logs, pids) lives in .dev-cluster/. Ports: Redis 6390,
# mock APNs 8443/8444, replica i intake 8080+i and admin 9090+i. Override the base ports
# with DEV_REDIS_PORT, DEV_APNS_PORT, DEV_RELAY_PORT, DEV_ADMIN_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=.dev-cluster
redis_port=${DEV_REDIS_PORT:-6390}
apns_port=${DEV_APNS_PORT:-8443}
relay_port=${DEV_RELAY_PORT:-8080}
admin_port=${DEV_ADMIN_PORT:-9090}

wait_for() { # url
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "dev-cluster: $1 did not come up" >&2
  return 1
}

up() {
  local n=${1:-3}
  [ -d "$dir" ] && { echo "dev-cluster: already up (scripts/dev-cluster.sh down first)" >&2; exit 1; }
  command -v redis-server >/dev/null || { echo "dev-cluster: redis-server is missing (apt-get install redis-server)" >&2; exit 1; }
  cargo build --release --locked -p sealrelay -p sealrelay-bench --bins
  mkdir -p "$dir"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize yes --pidfile "$PWD/$dir/redis.pid" --logfile "$PWD/$dir/redis.log"
  target/release/mock-apns --state-dir "$dir/apns" --production-port "$apns_port" \
    --sandbox-port $((apns_port + 1)) >"$dir/mock-apns.out" 2>"$dir/mock-apns.log" &
  echo $! >"$dir/mock-apns.pid"
  for _ in $(seq 1 100); do [ -s "$dir/apns/AuthKey.p8" ] && grep -q sandbox "$dir/mock-apns.out" && break; sleep 0.1; done
  for i in $(seq 0 $((n - 1))); do
    RELAY_LISTEN=127.0.0.1:$((relay_port + i)) \
    RELAY_ADMIN_LISTEN=127.0.0.1:$((admin_port + i)) \
    RELAY_REPLICA_NAME=dev-$i \
    RELAY_LOG_FORMAT=pretty \
    RELAY_SHUTDOWN_DELAY_S=0 \
    REDIS_URL=redis://127.0.0.1:$redis_port \
    APNS_TEAM_ID=TEAM123456 APNS_KEY_ID=KEY1234567 APNS_TOPIC=com.example.cronstable \
    APNS_AUTH_KEY_FILE="$dir/apns/AuthKey.p8" \
    APNS_CA_FILE="$dir/apns/ca.pem" \
    APNS_PRODUCTION_URL=https://127.0.0.1:$apns_port \
    APNS_SANDBOX_URL=https://127.0.0.1:$((apns_port + 1)) \
      target/release/sealrelay >"$dir/relay-$i.log" 2>&1 &
    echo $! >"$dir/relay-$i.pid"
  done
  for i in $(seq 0 $((n - 1))); do wait_for "http://127.0.0.1:$((admin_port + i))/readyz"; done
  echo "redis      redis://127.0.0.1:$redis_port"
  echo "mock APNs  https://127.0.0.1:$apns_port (production), https://127.0.0.1:$((apns_port + 1)) (sandbox)"
  for i in $(seq 0 $((n - 1))); do
    echo "relay $i    http://127.0.0.1:$((relay_port + i))/   admin http://127.0.0.1:$((admin_port + i))/metrics"
  done
  echo "try:       target/release/sealrelay smoke http://127.0.0.1:$relay_port/"
  echo "logs:      $dir/*.log"
}

down() {
  [ -d "$dir" ] || { echo "dev-cluster: not running"; return 0; }
  for f in "$dir"/relay-*.pid "$dir"/mock-apns.pid "$dir"/redis.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 0.5
  rm -rf "$dir"
  echo "dev-cluster: stopped"
}

status() {
  [ -d "$dir" ] || { echo "dev-cluster: not running"; return 0; }
  for f in "$dir"/*.pid; do
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$(basename "$f" .pid): running"; else echo "$(basename "$f" .pid): stopped"; fi
  done
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  status) status ;;
  *) echo "usage: scripts/dev-cluster.sh up [N] | status | down" >&2; exit 2 ;;
esac
