#!/usr/bin/env bash
# Runs README.md's first command (the relay on its embedded default) exactly as written, as
# a new user would on a fresh clone, and checks that the relay answers: GET / on the public
# listener and /readyz on the admin listener. Then stops it (SIGTERM to the process group
# this script started, by its id) and checks it drained and exited 0.
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=$(awk '/^```sh/{f=1; next} f{print; exit}' README.md | sed 's/[[:space:]]*#.*$//')
[ -n "$cmd" ] || { echo "readme-run: no command found in README.md's first sh block" >&2; exit 1; }
case "$cmd" in *"cargo run"*) ;; *) echo "readme-run: unexpected first command: $cmd" >&2; exit 1 ;; esac

# The command as written binds the defaults, 0.0.0.0:8080 and 0.0.0.0:9090.
for port in 8080 9090; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "readme-run: something already listens on :$port; the README's command needs it" >&2
    exit 1
  fi
done

log=$(mktemp)
echo "readme-run: \$ $cmd" >&2
setsid bash -c "$cmd" >"$log" 2>&1 &
pid=$!
stop() { kill -TERM -- "-$pid" 2>/dev/null || true; }
trap 'stop; rm -f "$log"' EXIT

# A release build from scratch takes minutes on two cores.
deadline=$((SECONDS + 1500))
until curl -fsS -o /dev/null http://127.0.0.1:9090/readyz 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "readme-run: the command exited before the relay answered:" >&2; tail -n 40 "$log" >&2; exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    echo "readme-run: no answer on :9090/readyz in time:" >&2; tail -n 40 "$log" >&2; exit 1
  fi
  sleep 1
done
banner=$(curl -fsS http://127.0.0.1:8080/)
case "$banner" in sealrelay*) ;; *) echo "readme-run: unexpected GET / answer: $banner" >&2; exit 1 ;; esac
answer=$(curl -sS -X POST -H 'content-type: application/json' --data-binary '{}' http://127.0.0.1:8080/)
[ "$answer" = '{"v":1,"error":"unsupported protocol version (expected v: 1)"}' ] \
  || { echo "readme-run: unexpected POST / answer: $answer" >&2; exit 1; }

kill -TERM -- "-$pid"
code=0; wait "$pid" || code=$?
trap 'rm -f "$log"' EXIT
grep -q '"stopped"\|stopped' "$log" || { echo "readme-run: the relay did not log its orderly stop:" >&2; tail -n 20 "$log" >&2; exit 1; }
echo "readme-run: the README's first command serves (GET / and /readyz answered, POST / validated, SIGTERM drained; exit $code)" >&2
