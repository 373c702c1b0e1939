#!/usr/bin/env bash
# Builds the sealrelay release image offline, with Debian's podman, `FROM scratch`: no base
# image is pulled and no container is run. The image holds exactly what the entrypoint needs
# (see docs/image.md for the list):
#   /usr/local/bin/sealrelay           the release binary, stripped (a copy: target/release/
#                                      sealrelay itself keeps its symbols for profiling)
#   the shared libraries ldd names     libc, libm, libgcc_s, the dynamic loader, at ldd's paths
#   /etc/ssl/certs/ca-certificates.crt system roots: read by the Redis client for rediss://
#                                      (fred -> rustls-native-certs); APNs, FCM, ICE and OTLP
#                                      use the webpki roots compiled into the binary
#   /etc/passwd, /etc/group            the unprivileged user and group sealrelay (65532)
#   /run/sealrelay/                    owned by 65532, mode 0700: the admin socket's default
#                                      directory (RELAY_ADMIN_SOCKET=/run/sealrelay/admin.sock)
# The Dockerfile at the repository root builds the same layout with Docker (for users and the
# release workflow, .github/workflows/release.yml).
#
# One image per architecture, linux/amd64 and linux/arm64: the arm64 binary is cross-compiled
# (cargo --target aarch64-unknown-linux-gnu, linked by Debian's gcc-aarch64-linux-gnu, its
# libraries from Debian's libc6-dev-arm64-cross) and run with qemu-user where that installs.
# Both are tagged <version>-<arch>; <version> and latest are manifest lists of the two (what a
# registry serves to either kind of node).
#
#   scripts/build-image.sh                 # sealrelay:<version>-amd64, -arm64; manifest lists
#                                          # sealrelay:<version> and sealrelay:latest
#   IMAGE=registry.example.com/you/sealrelay scripts/build-image.sh --push
#                                          # the same under $IMAGE, pushed (--all)
#
# Environment:
#   IMAGE                 repository to tag (default sealrelay, i.e. localhost/sealrelay)
#   ARCHES                architectures to build (default "amd64 arm64"; the manifest lists
#                         name the ones built)
#   SEALRELAY_IMAGE_STORE podman storage directory (default target/image-store): private,
#                         vfs driver, so no global container state is read or written; remove
#                         it to start over
#   GIT_SHA               org.opencontainers.image.revision and the binary's build_info git_sha
#                         (default: git rev-parse HEAD, which build.rs reads too)
#   REGISTRY_AUTH_FILE    credentials for --push (podman login --authfile ...)
# Prints the amd64 image's id on stdout as its last line; exits 3 when the arm64 Rust target
# cannot be installed (no network to rustup's server), 1 on any other failure. Installs podman and the arm64 cross
# toolchain with apt-get (and the Rust target with rustup) when run as root and missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

push=0
for arg in "$@"; do
  case "$arg" in
    --push) push=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $arg (only --push)" ;;
  esac
done

IMAGE="${IMAGE:-sealrelay}"
STORE="${SEALRELAY_IMAGE_STORE:-$ROOT/target/image-store}"
UID_GID=65532
BIN=/usr/local/bin/sealrelay

# The version from Cargo.toml's [package] table (the first `version =` line after it).
VERSION="$(awk '/^\[package\]/{p=1; next} /^\[/{p=0} p && /^version[[:space:]]*=/{gsub(/.*=[[:space:]]*"|".*/, ""); print; exit}' Cargo.toml)"
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || die "cannot read the version from Cargo.toml (got '$VERSION')"
# The binaries carry the commit too: build.rs reads git itself, or SEALRELAY_GIT_SHA when
# GIT_SHA is given (exported only then, so an ordinary build reuses target/release as is).
if [[ -n "${GIT_SHA:-}" ]]; then export SEALRELAY_GIT_SHA="$GIT_SHA"; fi
GIT_SHA="${GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
read -r -a arches <<<"${ARCHES:-amd64 arm64}"
for a in "${arches[@]}"; do
  case "$a" in amd64|arm64) ;; *) die "ARCHES: $a is not amd64 or arm64" ;; esac
done
[[ "$(uname -m)" == x86_64 ]] || die "builds on an x86_64 host (amd64 natively, arm64 cross-compiled)"
has_arch() { [[ " ${arches[*]} " == *" $1 "* ]]; }

# --- tools -----------------------------------------------------------------------------------
need_apt=()
command -v podman >/dev/null || need_apt+=(podman)
command -v ldd >/dev/null || need_apt+=(libc-bin)
command -v strip >/dev/null || need_apt+=(binutils)
[[ -r /etc/ssl/certs/ca-certificates.crt ]] || need_apt+=(ca-certificates)
if has_arch arm64; then
  command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu)
  [[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]] || need_apt+=(libc6-dev-arm64-cross)
  # Optional: runs the arm64 binary's --version (without it, only its ELF header is checked).
  if ! command -v qemu-aarch64 >/dev/null && [[ "$(id -u)" -eq 0 ]]; then need_apt+=(qemu-user); fi
fi
if ((${#need_apt[@]})); then
  [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null \
    || die "missing ${need_apt[*]}: install them (Debian: apt-get install ${need_apt[*]})"
  log "apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Private storage; vfs needs neither overlay mounts nor fuse.
PODMAN=(podman --root "$STORE/root" --runroot "$STORE/runroot" --storage-driver vfs
        --cgroup-manager cgroupfs --events-backend none)

# --- the binaries ----------------------------------------------------------------------------
# Built exactly as `cargo build --release` is elsewhere (readme-run, benchmarks), so an up to
# date target/release/sealrelay is reused.
if has_arch amd64; then
  log "cargo build --release --locked -p sealrelay (version $VERSION, $GIT_SHA)"
  cargo build --release --locked -p sealrelay >&2
fi
if has_arch arm64; then
  if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    log "rustup target add aarch64-unknown-linux-gnu"
    # Exit 3: the arm64 toolchain cannot be had here (scripts/check-image.sh says so and
    # checks amd64 alone); every other failure is exit 1.
    rustup target add aarch64-unknown-linux-gnu >&2 \
      || { log "error: rustup target add aarch64-unknown-linux-gnu failed (offline?); ARCHES=amd64 builds amd64 alone"; exit 3; }
  fi
  log "cargo build --release --locked -p sealrelay --target aarch64-unknown-linux-gnu"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
    cargo build --release --locked -p sealrelay --target aarch64-unknown-linux-gnu >&2
fi

work="$(mktemp -d "${TMPDIR:-/var/tmp}/sealrelay-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
mkdir -p "$STORE"

# arm64's libraries: those the binary's DT_NEEDED entries name, from the cross sysroot, at
# Debian arm64's paths (/lib/aarch64-linux-gnu; the loader where PT_INTERP says).
arm64_libs() { # binary
  local interp
  interp="$(readelf -l "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
  [[ -n "$interp" ]] || die "no program interpreter in $1"
  echo "$interp"
  readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r name; do
    [[ "$name" == "$(basename "$interp")" ]] || echo "/lib/aarch64-linux-gnu/$name"
  done
}

# Builds one architecture's image, tagged <version>-<arch>; prints its id.
build_arch() { # amd64|arm64
  local arch="$1" src_bin strip_cmd libs rootfs lib from
  case "$arch" in
    amd64) src_bin="$ROOT/target/release/sealrelay"; strip_cmd=strip ;;
    arm64) src_bin="$ROOT/target/aarch64-unknown-linux-gnu/release/sealrelay"; strip_cmd=aarch64-linux-gnu-strip ;;
  esac
  [[ -x "$src_bin" ]] || die "$src_bin was not built"
  rootfs="$work/$arch/rootfs"
  umask 022
  install -d -m 0755 "$rootfs"
  install -D -m 0755 "$src_bin" "$rootfs$BIN"
  "$strip_cmd" --strip-all "$rootfs$BIN"

  if [[ "$arch" == amd64 ]]; then
    "$rootfs$BIN" --version >/dev/null || die "the stripped binary does not run"
    # Exactly the libraries the binary links, at the paths the dynamic loader resolved them
    # to (ldd prints "name => /path (addr)" and the loader as "/path (addr)"); each copied as
    # a regular file (cp -L), so no symlink points outside the image.
    libs="$(ldd "$rootfs$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)"
    [[ -n "$libs" ]] || die "ldd names no library (a static binary? then drop this step)"
    if ldd "$rootfs$BIN" | grep -q 'not found'; then die "ldd: $(ldd "$rootfs$BIN" | grep 'not found')"; fi
    while read -r lib; do
      install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
    done <<<"$libs"
  else
    readelf -h "$rootfs$BIN" | grep -q 'Machine:.*AArch64' || die "$src_bin is not an AArch64 binary"
    libs="$(arm64_libs "$rootfs$BIN" | sort -u)"
    while read -r lib; do
      from="/usr/aarch64-linux-gnu/lib/$(basename "$lib")"
      [[ -e "$from" ]] || die "$from is missing (apt-get install libc6-dev-arm64-cross)"
      install -D -m 0755 "$(readlink -f "$from")" "$rootfs$lib"
    done <<<"$libs"
    if command -v qemu-aarch64 >/dev/null; then
      # From the image's own root: the libraries it carries are all the binary needs.
      qemu-aarch64 -L "$rootfs" "$rootfs$BIN" --version >/dev/null \
        || die "the arm64 binary does not run under qemu-aarch64 with the image's libraries"
    else
      log "qemu-aarch64 not found: the arm64 binary is checked by its ELF header only"
    fi
  fi

  # CA roots for rediss:// (rustls-native-certs probes this path first).
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"

  # The user; no home, no shell (the image has none).
  install -d -m 0755 "$rootfs/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nsealrelay:x:%d:%d:sealrelay:/nonexistent:/sbin/nologin\n' \
    "$UID_GID" "$UID_GID" >"$rootfs/etc/passwd"
  printf 'root:x:0:\nsealrelay:x:%d:\n' "$UID_GID" >"$rootfs/etc/group"
  chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
  install -d -m 0700 "$rootfs/run/sealrelay"

  # One layer from a tarball: ADD extracts it keeping ownership and modes (COPY would make
  # everything root's). Sorted names, numeric owners and a fixed mtime: the same inputs give
  # the same layer.
  tar -C "$rootfs" --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$epoch" \
    --exclude=./run/sealrelay -cf "$work/$arch/rootfs.tar" .
  tar -C "$rootfs" --numeric-owner --owner="$UID_GID" --group="$UID_GID" --mtime="@$epoch" \
    --no-recursion -rf "$work/$arch/rootfs.tar" ./run/sealrelay

  cat >"$work/$arch/Containerfile" <<EOF
FROM scratch
ADD rootfs.tar /
LABEL org.opencontainers.image.title="sealrelay" \\
      org.opencontainers.image.description="Push relay: forwards sealed alert ciphertexts to APNs" \\
      org.opencontainers.image.source="https://github.com/sealrelay/sealrelay" \\
      org.opencontainers.image.licenses="Apache-2.0" \\
      org.opencontainers.image.version="$VERSION" \\
      org.opencontainers.image.revision="$GIT_SHA"
USER $UID_GID:$UID_GID
EXPOSE 8080 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["$BIN"]
CMD ["serve"]
EOF

  log "podman build --platform linux/$arch -> $IMAGE:$VERSION-$arch (storage $STORE)"
  "${PODMAN[@]}" build --quiet --network=none --pull=never --format oci --platform "linux/$arch" \
    --timestamp "$epoch" -t "$IMAGE:$VERSION-$arch" \
    -f "$work/$arch/Containerfile" "$work/$arch" >"$work/$arch/id" \
    || die "podman build ($arch) failed"
  tail -n 1 "$work/$arch/id"
}

declare -A ids
for a in "${arches[@]}"; do
  ids[$a]="$(build_arch "$a")"
done
# <version> and latest: manifest lists of the per-architecture images, made anew each build.
for tag in "$VERSION" latest; do
  "${PODMAN[@]}" manifest rm "$IMAGE:$tag" >/dev/null 2>&1 || "${PODMAN[@]}" rmi "$IMAGE:$tag" >/dev/null 2>&1 || true
  "${PODMAN[@]}" manifest create "$IMAGE:$tag" >/dev/null || die "podman manifest create $IMAGE:$tag failed"
  for a in "${arches[@]}"; do
    "${PODMAN[@]}" manifest add --os linux --arch "$a" "$IMAGE:$tag" "containers-storage:${ids[$a]}" >/dev/null \
      || die "podman manifest add $IMAGE:$tag ($a) failed"
  done
done
log "manifest lists $IMAGE:$VERSION and $IMAGE:latest: ${arches[*]}"
# Drop images left untagged by earlier builds (vfs keeps a full copy of each).
"${PODMAN[@]}" image prune -f >/dev/null 2>&1 || true
id="${ids[amd64]:-${ids[${arches[0]}]}}"

if ((push)); then
  [[ "$IMAGE" == */* ]] || die "--push needs IMAGE=registry/owner/name"
  for tag in "$VERSION" latest; do
    log "podman manifest push --all $IMAGE:$tag"
    "${PODMAN[@]}" manifest push --all --digestfile "$work/digest" "$IMAGE:$tag" "docker://$IMAGE:$tag" >&2 \
      || die "podman manifest push $IMAGE:$tag failed (podman login ${IMAGE%%/*} first?)"
    log "pushed $IMAGE:$tag@$(cat "$work/digest")"
  done
fi

size="$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$id")"
log "built $IMAGE:$VERSION (${arches[*]}; $id, $((size / 1024)) KiB)"
echo "$id"
