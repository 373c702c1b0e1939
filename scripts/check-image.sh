#!/usr/bin/env bash
# Builds the release image (scripts/build-image.sh) and checks it without running a container
# (this machine can build and mount images but not run them):
#   1. the images build, amd64 and arm64, each with the labels (the revision is the commit),
#      user, entrypoint and architecture it should have, and <version> is a manifest list of
#      the two;
#   2. each filesystem holds exactly the expected files (the stripped binary of its
#      architecture, the libraries it links, passwd/group, the CA roots, /run/sealrelay owned by
#      65532), no more, no fewer; the arm64 binary runs `--version` under qemu-aarch64 from
#      its image's root (where qemu-user installs);
#   3. the entrypoint, started from a copy of the unpacked image root with chroot as 65532:
#      `check-config` passes on a dry-run config, and `serve` answers /healthz and /readyz
#      on the admin listener, GET / and a POST / with an invalid body on the public one, with
#      the admin socket at its default path, and /metrics names the commit in build_info; then
#      it is stopped by its process id (SIGTERM) and must exit 0.
#   4. the release workflow is validated against GitHub's workflow schema (action-validator,
#      from npm), and linted with actionlint too where one is available (ACTIONLINT=..., PATH).
# Runs as root (podman's private storage, chroot). Idempotent; bounded by timeouts.
#
#   scripts/check-image.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf 'check-image: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[[ "$(id -u)" -eq 0 ]] || fail "needs root (podman storage, chroot)"
export SEALRELAY_IMAGE_STORE="${SEALRELAY_IMAGE_STORE:-$ROOT/target/image-store}"
IMAGE="${IMAGE:-sealrelay}"
STORE="$SEALRELAY_IMAGE_STORE"
PODMAN=(podman --root "$STORE/root" --runroot "$STORE/runroot" --storage-driver vfs
        --cgroup-manager cgroupfs --events-backend none)
UID_GID=65532
BIN=/usr/local/bin/sealrelay

work="$(mktemp -d "${TMPDIR:-/var/tmp}/sealrelay-check-image.XXXXXX")"
pid=""
mounted=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    sleep 2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  [[ -z "$mounted" ]] || "${PODMAN[@]}" image unmount "$mounted" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. build --------------------------------------------------------------------------------
start=$SECONDS
arches="amd64 arm64"
rc=0
IMAGE="$IMAGE" timeout 3000 scripts/build-image.sh >"$work/build.out" || rc=$?
if ((rc == 3)); then
  # Only when rustup cannot fetch the arm64 standard library (a machine without access to
  # rustup's server): said loudly, and everything else is still checked for amd64.
  log "WARNING: arm64 SKIPPED: the aarch64-unknown-linux-gnu target cannot be installed here; checking amd64 alone"
  arches="amd64"
  rc=0
  ARCHES=amd64 IMAGE="$IMAGE" timeout 3000 scripts/build-image.sh >"$work/build.out" || rc=$?
fi
((rc == 0)) || fail "scripts/build-image.sh failed ($rc)"
id="$(tail -n 1 "$work/build.out")"
VERSION="$(awk '/^\[package\]/{p=1; next} /^\[/{p=0} p && /^version[[:space:]]*=/{gsub(/.*=[[:space:]]*"|".*/, ""); print; exit}' Cargo.toml)"
log "built $id in $((SECONDS - start)) s"

GIT_SHA="$(git rev-parse HEAD)"
[[ "$("${PODMAN[@]}" image inspect --format '{{.Id}}' "$IMAGE:$VERSION-amd64")" == "$id"* ]] \
  || fail "$IMAGE:$VERSION-amd64 is not the image just built"
# The manifest list: one image per architecture.
"${PODMAN[@]}" manifest inspect "$IMAGE:$VERSION" >"$work/manifest.json" || fail "$IMAGE:$VERSION is not a manifest list"
platforms="$(python3 -c 'import json,sys; print(" ".join(sorted(m["platform"]["os"]+"/"+m["platform"]["architecture"] for m in json.load(open(sys.argv[1]))["manifests"])))' "$work/manifest.json")"
want="$(for a in $arches; do printf 'linux/%s ' "$a"; done)"
[[ "$platforms " == "$want" ]] || fail "$IMAGE:$VERSION lists '$platforms', not ${want% }"
log "manifest list $IMAGE:$VERSION: $platforms"

# The libraries an image's binary needs, at their paths in the image: for amd64 what ldd
# resolves; for arm64 the ELF's program interpreter and its DT_NEEDED names in
# /lib/aarch64-linux-gnu (Debian arm64's multiarch directory, which that loader searches).
libs_of() { # arch binary
  if [[ "$1" == amd64 ]]; then
    ldd "$2" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
  else
    local interp
    interp="$(readelf -l "$2" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
    echo "$interp"
    readelf -d "$2" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -vx "$(basename "$interp")" \
      | sed 's|^|/lib/aarch64-linux-gnu/|'
  fi | sort -u
}

for arch in $arches; do
  ref="$IMAGE:$VERSION-$arch"
  inspect() { "${PODMAN[@]}" image inspect --format "$1" "$ref"; }
  [[ "$(inspect '{{.Architecture}}')" == "$arch" && "$(inspect '{{.Os}}')" == linux ]] || fail "$ref is $(inspect '{{.Os}}/{{.Architecture}}')"
  [[ "$(inspect '{{.Config.User}}')" == "$UID_GID:$UID_GID" ]] || fail "$ref: USER is '$(inspect '{{.Config.User}}')', not $UID_GID:$UID_GID"
  [[ "$(inspect '{{json .Config.Entrypoint}}')" == "[\"$BIN\"]" ]] || fail "$ref: ENTRYPOINT is $(inspect '{{json .Config.Entrypoint}}')"
  [[ "$(inspect '{{index .Config.Labels "org.opencontainers.image.version"}}')" == "$VERSION" ]] || fail "$ref: version label is not $VERSION"
  [[ "$(inspect '{{index .Config.Labels "org.opencontainers.image.revision"}}')" == "$GIT_SHA" ]] || fail "$ref: revision label is not $GIT_SHA"
  [[ "$(inspect '{{index .Config.Labels "org.opencontainers.image.licenses"}}')" == "Apache-2.0" ]] || fail "$ref: licenses label is not Apache-2.0"
  [[ "$(inspect '{{index .Config.Labels "org.opencontainers.image.source"}}')" == "https://github.com/sealrelay/sealrelay" ]] || fail "$ref: source label"
  ports="$(inspect '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}')"
  [[ "$ports" == *8080/tcp* && "$ports" == *9090/tcp* ]] || fail "$ref: EXPOSE is '$ports', not 8080 and 9090"
  [[ "$(inspect '{{len .RootFS.Layers}}')" == 1 ]] || fail "$ref: expected one layer"
  size="$(inspect '{{.Size}}')"
  log "$arch config ok: user $UID_GID, entrypoint $BIN, version $VERSION, revision $GIT_SHA, ports $ports; size $((size / 1024)) KiB"

  # --- 2. the filesystem, file by file -------------------------------------------------------
  mnt="$("${PODMAN[@]}" image mount "$ref")" || fail "podman image mount $ref failed"
  mounted="$ref"
  [[ -x "$mnt$BIN" ]] || fail "$BIN missing from $ref"
  machine="$(readelf -h "$mnt$BIN" | sed -n 's/.*Machine:[[:space:]]*//p')"
  case "$arch" in
    amd64) [[ "$machine" == *X86-64* ]] || fail "$ref: the binary is for '$machine'" ;;
    arm64) [[ "$machine" == *AArch64* ]] || fail "$ref: the binary is for '$machine'" ;;
  esac

  # Expected: every path with its type and owner, directories included.
  {
    add() { # path type owner
      local p="$1" d
      d="$(dirname "$p")"
      while [[ "$d" != / ]]; do printf 'd 0:0 .%s\n' "$d"; d="$(dirname "$d")"; done
      printf '%s %s .%s\n' "$2" "$3" "$p"
    }
    printf 'd 0:0 .\n'
    add "$BIN" f 0:0
    add /etc/passwd f 0:0
    add /etc/group f 0:0
    add /etc/ssl/certs/ca-certificates.crt f 0:0
    add /run/sealrelay d "$UID_GID:$UID_GID"
    libs_of "$arch" "$mnt$BIN" | while read -r lib; do add "$lib" f 0:0; done
  } | sort -u -k3 >"$work/expected"
  (cd "$mnt" && find . -printf '%y %U:%G %p\n') | sort -k3 >"$work/actual"
  if ! diff -u "$work/expected" "$work/actual" >"$work/diff"; then
    log "$ref: the image's files differ from the expected list (- missing, + extra):"
    grep '^[-+][^-+]' "$work/diff" >&2 || true
    fail "unexpected image contents"
  fi
  log "$arch files ok: exactly $(grep -c '^f' "$work/actual") files in $(grep -c '^d' "$work/actual") directories:"
  (cd "$mnt" && find . -type f -printf '  %p  %s bytes  mode %m\n' | sort) >&2

  # Stripped: no symbol table, and well under the unstripped ~96 MB.
  if readelf -S "$mnt$BIN" | grep -q '\.symtab'; then fail "$ref: $BIN is not stripped (.symtab present)"; fi
  bin_size="$(stat -c %s "$mnt$BIN")"
  ((bin_size < 30 * 1024 * 1024)) || fail "$ref: $BIN is $bin_size bytes (> 30 MB): not stripped?"
  [[ "$(stat -c '%a %u:%g' "$mnt/run/sealrelay")" == "700 $UID_GID:$UID_GID" ]] || fail "$ref: /run/sealrelay is $(stat -c '%a %u:%g' "$mnt/run/sealrelay")"
  log "$arch binary ok: stripped, $bin_size bytes ($machine)"
  if [[ "$arch" == arm64 ]]; then
    if command -v qemu-aarch64 >/dev/null; then
      # With the image's root as the sysroot: it carries every library the binary needs.
      qemu-aarch64 -L "$mnt" "$mnt$BIN" --version >"$work/version" 2>&1 \
        || { cat "$work/version" >&2; fail "$ref: --version under qemu-aarch64 failed"; }
      grep -q "$VERSION" "$work/version" || fail "$ref: --version says $(cat "$work/version")"
      log "arm64 binary runs under qemu-aarch64 from its image's root: $(cat "$work/version")"
    else
      log "qemu-aarch64 not found: the arm64 binary was checked by its ELF header only"
    fi
  fi
  "${PODMAN[@]}" image unmount "$mounted" >/dev/null 2>&1 || true
  mounted=""
done

# --- 3. the entrypoint from the unpacked root ------------------------------------------------
# A copy of the root, so the relay's admin socket is not written into the stored layer.
rootfs="$work/root"
mnt="$("${PODMAN[@]}" image mount "$IMAGE:$VERSION-amd64")" || fail "podman image mount failed"
mounted="$IMAGE:$VERSION-amd64"
cp -a "$mnt/." "$rootfs/"
"${PODMAN[@]}" image unmount "$mounted" >/dev/null 2>&1 || true
mounted=""
CHROOT="$(command -v chroot)" || fail "chroot not found"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port="$(free_port)"; admin_port="$(free_port)"
while [[ "$admin_port" == "$port" ]]; do admin_port="$(free_port)"; done
# Only these variables reach the relay (env -i): the image's own defaults otherwise.
relay_env=(RELAY_DRY_RUN=true "RELAY_LISTEN=127.0.0.1:$port" "RELAY_ADMIN_LISTEN=127.0.0.1:$admin_port"
           RELAY_ADMIN_SOCKET=/run/sealrelay/admin.sock)
in_image() { env -i "${relay_env[@]}" timeout "$1" "$CHROOT" --userspec="$UID_GID:$UID_GID" "$rootfs" "${@:2}"; }

in_image 30 "$BIN" --version >"$work/version" 2>&1 || { cat "$work/version" >&2; fail "$BIN --version failed in the chroot"; }
grep -q "$VERSION" "$work/version" || fail "--version says $(cat "$work/version"), not $VERSION"
in_image 30 "$BIN" check-config >"$work/check-config" 2>&1 \
  || { cat "$work/check-config" >&2; fail "check-config failed in the image root"; }
log "check-config ok as $UID_GID in the image root"

env -i "${relay_env[@]}" "$CHROOT" --userspec="$UID_GID:$UID_GID" "$rootfs" "$BIN" serve >"$work/serve.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 60))
until curl -fsS -o /dev/null "http://127.0.0.1:$admin_port/readyz" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { tail -n 40 "$work/serve.log" >&2; fail "the relay exited before answering /readyz"; }
  ((SECONDS < deadline)) || { tail -n 40 "$work/serve.log" >&2; fail "no /readyz 200 within 60 s"; }
  sleep 0.5
done
code() { curl -sS -o "$work/body" -w '%{http_code}' --max-time 10 "$@"; }
[[ "$(code "http://127.0.0.1:$admin_port/readyz")" == 200 ]] || fail "/readyz not 200"
[[ "$(code "http://127.0.0.1:$admin_port/healthz")" == 200 ]] || fail "/healthz not 200: $(cat "$work/body")"
[[ "$(code "http://127.0.0.1:$port/")" == 200 ]] || fail "GET / not 200"
grep -q '^sealrelay' "$work/body" || fail "GET / answered $(cat "$work/body")"
c="$(code -X POST -H 'content-type: application/json' --data-binary '{}' "http://127.0.0.1:$port/")"
[[ "$c" == 400 && "$(cat "$work/body")" == '{"v":1,"error":"unsupported protocol version (expected v: 1)"}' ]] \
  || fail "POST / with an invalid body answered $c $(cat "$work/body")"
[[ -S "$rootfs/run/sealrelay/admin.sock" ]] || { tail -n 20 "$work/serve.log" >&2; fail "no admin socket at /run/sealrelay/admin.sock"; }
[[ "$(stat -c '%u %a' "$rootfs/run/sealrelay/admin.sock")" == "$UID_GID 600" ]] || fail "admin socket is $(stat -c '%u %a' "$rootfs/run/sealrelay/admin.sock")"
code "http://127.0.0.1:$admin_port/metrics" >/dev/null
grep -q "^sealrelay_build_info{.*git_sha=\"$GIT_SHA\"" "$work/body" \
  || fail "build_info does not name the commit $GIT_SHA: $(grep '^sealrelay_build_info' "$work/body")"
log "serve ok: /readyz 200, /healthz 200, GET / banner, POST / {} -> 400, admin socket $UID_GID 0600, build_info git_sha $GIT_SHA"

kill -TERM "$pid"
rc=0
timeout 30 tail --pid="$pid" -f /dev/null || fail "the relay did not stop within 30 s of SIGTERM"
wait "$pid" || rc=$?
pid=""
((rc == 0)) || { tail -n 20 "$work/serve.log" >&2; fail "the relay exited $rc after SIGTERM"; }
log "SIGTERM: drained and exited 0"

# --- 4. the release workflow -----------------------------------------------------------------
wf=.github/workflows/release.yml
TOOLS="${SEALRELAY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sealrelay-deploy-tools}"
# Validated against GitHub's workflow schema by action-validator (npm, pinned; it ships the
# schema and checks globs), and by actionlint as well where one is on PATH or in $ACTIONLINT
# (it cannot be installed here: every package of it downloads its binary from GitHub).
AV_DIR="$TOOLS/action-validator-0.6.0"
if [[ ! -x "$AV_DIR/node_modules/.bin/action-validator" ]]; then
  if ! command -v npm >/dev/null; then
    [[ "$(id -u)" -eq 0 ]] || fail "npm not found (apt-get install npm), needed for action-validator"
    log "installing nodejs and npm"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null \
      || fail "apt-get install nodejs npm"
  fi
  log "installing action-validator 0.6.0 from npm into $AV_DIR"
  mkdir -p "$AV_DIR"
  timeout 300 npm install --prefix "$AV_DIR" --no-audit --no-fund --loglevel=error \
    @action-validator/cli@0.6.0 @action-validator/core@0.6.0 >&2 || fail "npm install action-validator"
fi
timeout 60 "$AV_DIR/node_modules/.bin/action-validator" "$wf" >&2 || fail "action-validator $wf"
grep -Eq '^ +packages: write$' "$wf" || fail "$wf: the image job must have packages: write"
log "action-validator $wf ok"
ACTIONLINT="${ACTIONLINT:-$(command -v actionlint || true)}"
if [[ -n "$ACTIONLINT" ]]; then
  "$ACTIONLINT" -no-color "$wf" >&2 || fail "actionlint $wf"
  log "actionlint $wf ok"
fi
log "all checks passed in $((SECONDS - start)) s"
