#!/usr/bin/env bash
# The operator's view, checked live: runs a dry-run relay (in-process store) on 127.0.0.1 under
# a short bounded load (v1 posts valid and invalid, signed pushes through the CLI and the admin
# socket, mailbox requests, a signal rendezvous, ICE), scrapes it every second with a real
# Prometheus server, evaluates EVERY query of grafana/sealrelay-dashboard.json through
# Prometheus' HTTP API (Grafana's variables substituted: $namespace/$pod from the templating
# queries' own answers, $__rate_interval 1m, $__range the run's length), reports per panel
# whether it has data, renders the dashboard's grid as HTML (SVG time series, stat values)
# and screenshots it with headless Chromium into docs/screenshots/dashboard.png.
#
# Exits non-zero when a panel has no data (an empty answer, or only NaN: 0/0 or an empty
# histogram) unless scripts/check_dashboard.py's ALLOW_NO_DATA lists it with its reason.
#
# Grafana itself is not used: it is not packaged by Debian (apt-cache policy grafana: no such
# package) and the npm package "grafana" is a placeholder. The Prometheus server comes from
# Debian's `prometheus` package, extracted (not installed: its postinst would start a server
# on :9090) into the same cache as scripts/check-deploy.sh's promtool
# ($SEALRELAY_TOOLS_DIR, default ~/.cache/sealrelay-deploy-tools). Needs python3, node (for
# the signal WebSockets; skipped without it) and chromium (scripts/test.sh installs it).
#
#   scripts/check-dashboard.sh                 # builds target/debug/sealrelay first
#   SEALRELAY_BIN=target/release/sealrelay scripts/check-dashboard.sh
#   CHECK_DASHBOARD_OUT=/tmp/d.png scripts/check-dashboard.sh   # screenshot elsewhere
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}"
log() { printf 'check-dashboard: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v python3 >/dev/null || die "python3 not found"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[[ -n "$CHROMIUM" ]] || die "chromium not found (apt-get install chromium; scripts/test.sh does)"

# --- the relay binary ------------------------------------------------------------------------
BIN="${SEALRELAY_BIN:-}"
if [[ -z "$BIN" ]]; then
  (cd "$ROOT" && cargo build -q --bin sealrelay) || die "cargo build --bin sealrelay failed"
  BIN="$ROOT/target/debug/sealrelay"
fi
[[ -x "$BIN" ]] || die "$BIN is not an executable"

# --- the Prometheus server: the cached copy, else extracted from Debian's package -------------
mkdir -p "$TOOLS"
PROMETHEUS="${PROMETHEUS:-}"
if [[ -z "$PROMETHEUS" ]]; then
  exec 9>"$TOOLS/.lock"
  if command -v flock >/dev/null; then flock 9; fi
  if [[ ! -x "$TOOLS/prometheus" ]]; then
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
      || die "no Prometheus server and not a Debian-based system: set PROMETHEUS=/path/to/prometheus"
    log "fetching the prometheus server from Debian's prometheus package into $TOOLS"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    chmod 0777 "$work"   # apt-get download writes as the unprivileged _apt user
    if ! (cd "$work" && timeout 300 apt-get download -q prometheus >/dev/null 2>&1); then
      [[ "$(id -u)" -eq 0 ]] && { log "apt-get update"; timeout 300 apt-get update -q >/dev/null; }
      (cd "$work" && timeout 300 apt-get download -q prometheus >/dev/null) \
        || die "apt-get download prometheus failed (run apt-get update as root first?)"
    fi
    dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
    install -m 0755 "$work/x/usr/bin/prometheus" "$TOOLS/prometheus.tmp"
    mv -f "$TOOLS/prometheus.tmp" "$TOOLS/prometheus"
    [[ -x "$TOOLS/promtool" ]] || install -m 0755 "$work/x/usr/bin/promtool" "$TOOLS/promtool"
    rm -rf "$work"; trap - EXIT
  fi
  exec 9>&-
  PROMETHEUS="$TOOLS/prometheus"
fi
"$PROMETHEUS" --version >/dev/null 2>&1 || die "$PROMETHEUS does not run"

exec python3 "$ROOT/scripts/check_dashboard.py" \
  --relay "$BIN" --prometheus "$PROMETHEUS" --chromium "$CHROMIUM" \
  --dashboard "$ROOT/grafana/sealrelay-dashboard.json" \
  --out "${CHECK_DASHBOARD_OUT:-$ROOT/docs/screenshots/dashboard.png}"
