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
#   scripts/build-image.sh                 # tags sealrelay:<version> and sealrelay:latest
#   IMAGE=registry.example.com/you/sealrelay scripts/build-image.sh --push
#                                          # tags $IMAGE:<version> and $IMAGE:latest, pushes both
#
# Environment:
#   IMAGE                 repository to tag (default sealrelay, i.e. localhost/sealrelay)
#   SEALRELAY_IMAGE_STORE podman storage directory (default target/image-store): private,
#                         vfs driver, so no global container state is read or written; remove
#                         it to start over
#   GIT_SHA               org.opencontainers.image.revision (default: git rev-parse HEAD)
#   REGISTRY_AUTH_FILE    credentials for --push (podman login --authfile ...)
# Prints the image id on stdout as its last line. Installs podman with apt-get when run as
# root and it is missing.
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
GIT_SHA="${GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"

# --- tools -----------------------------------------------------------------------------------
need_apt=()
command -v podman >/dev/null || need_apt+=(podman)
command -v ldd >/dev/null || need_apt+=(libc-bin)
command -v strip >/dev/null || need_apt+=(binutils)
[[ -r /etc/ssl/certs/ca-certificates.crt ]] || need_apt+=(ca-certificates)
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

# --- the binary ------------------------------------------------------------------------------
log "cargo build --release --locked -p sealrelay (version $VERSION)"
# Built exactly as `cargo build --release` is elsewhere (readme-run, benchmarks), so an up to
# date target/release/sealrelay is reused. (SEALRELAY_GIT_SHA is read at compile time:
# setting it here would rebuild the relay each time; the Dockerfile sets it.)
cargo build --release --locked -p sealrelay >&2
src_bin="$ROOT/target/release/sealrelay"
[[ -x "$src_bin" ]] || die "$src_bin was not built"

work="$(mktemp -d "${TMPDIR:-/var/tmp}/sealrelay-image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
umask 022
install -d -m 0755 "$rootfs"

install -D -m 0755 "$src_bin" "$rootfs$BIN"
strip --strip-all "$rootfs$BIN"
"$rootfs$BIN" --version >/dev/null || die "the stripped binary does not run"

# Exactly the libraries the binary links, at the paths the dynamic loader resolved them to
# (ldd prints "name => /path (addr)" and the loader as "/path (addr)"); each copied as a
# regular file (cp -L), so no symlink points outside the image.
libs="$(ldd "$rootfs$BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)"
[[ -n "$libs" ]] || die "ldd names no library (a static binary? then drop this step)"
if ldd "$rootfs$BIN" | grep -q 'not found'; then die "ldd: $(ldd "$rootfs$BIN" | grep 'not found')"; fi
while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done <<<"$libs"
printf '%s\n' "$libs" >"$work/libs.txt"

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
epoch="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
tar -C "$rootfs" --sort=name --numeric-owner --owner=0 --group=0 --mtime="@$epoch" \
  --exclude=./run/sealrelay -cf "$work/rootfs.tar" .
tar -C "$rootfs" --numeric-owner --owner="$UID_GID" --group="$UID_GID" --mtime="@$epoch" \
  --no-recursion -rf "$work/rootfs.tar" ./run/sealrelay

cat >"$work/Containerfile" <<EOF
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

log "podman build -> $IMAGE:$VERSION, $IMAGE:latest (storage $STORE)"
mkdir -p "$STORE"
"${PODMAN[@]}" build --quiet --network=none --pull=never --format oci \
  --timestamp "$epoch" -t "$IMAGE:$VERSION" -t "$IMAGE:latest" \
  -f "$work/Containerfile" "$work" >"$work/id" \
  || die "podman build failed"
id="$(tail -n 1 "$work/id")"
# Drop images left untagged by earlier builds (vfs keeps a full copy of each).
"${PODMAN[@]}" image prune -f >/dev/null 2>&1 || true

if ((push)); then
  [[ "$IMAGE" == */* ]] || die "--push needs IMAGE=registry/owner/name"
  for tag in "$VERSION" latest; do
    log "podman push $IMAGE:$tag"
    "${PODMAN[@]}" push --digestfile "$work/digest" "$IMAGE:$tag" "docker://$IMAGE:$tag" >&2 \
      || die "podman push $IMAGE:$tag failed (podman login ${IMAGE%%/*} first?)"
    log "pushed $IMAGE:$tag@$(cat "$work/digest")"
  done
fi

size="$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$id")"
log "built $IMAGE:$VERSION ($id, $((size / 1024)) KiB)"
echo "$id"
