#!/usr/bin/env bash
# Runs the browser test against tests/browser/serve_pages.py (the pages as pages.rs serves
# them), or against a running relay when its base URL is given:
#
#   tests/browser/run_local.sh [BASE_URL] [OUT_DIR]
#
# Needs node and Debian's chromium (apt-get install -y chromium). Installs playwright-core
# from package-lock.json on first use (npm ci; it downloads no browser).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base="${1:-}"
out="${2:-$here/../../target/browser-pages}"

if [ ! -d "$here/node_modules/playwright-core" ]; then
  (cd "$here" && npm ci --no-audit --no-fund)
fi

server=""
cleanup() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [ -z "$base" ]; then
  fifo="$(mktemp -u)"
  mkfifo "$fifo"
  python3 "$here/serve_pages.py" --ttl 300 >"$fifo" &
  server=$!
  read -r base <"$fifo"
  rm -f "$fifo"
fi
node "$here/pages.mjs" "$base" "$out"
