#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs them.
#
#   scripts/test.sh            # everything, including the real-cronstable end-to-end test
#   scripts/test.sh -E 'test(compat)'   # extra arguments go to cargo nextest
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# Debian's redis-server package may start a server on 6379; the tests start their own.
pkill -x redis-server >/dev/null 2>&1 || true

# Deployment artifacts (k8s/, helm/, grafana/, Dockerfile) against the source. It also
# fetches promtool (from Debian's prometheus package, without installing the package) into
# the tools directory, which the metrics test uses.
log "scripts/check-deploy.sh"
scripts/check-deploy.sh
export PATH="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}:$PATH"

# The real cronstable daemon and PyNaCl, for the end-to-end compatibility test.
venv="${SEALRELAY_VENV:-target/e2e-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cronstable, nacl' >/dev/null 2>&1; then
  log "creating $venv with cronstable[push]==1.2.72 and PyNaCl"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "cronstable[push]==1.2.72" pynacl
fi
export SEALRELAY_E2E_PYTHON="$PWD/$venv/bin/python"

if ! command -v cargo-nextest >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

log "cargo nextest run"
cargo nextest run --locked --profile ci --run-ignored all "$@"
