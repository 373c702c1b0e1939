# syntax=docker/dockerfile:1
#
# sealrelay container image.
#
#   docker build -t sealrelay:dev \
#     --build-arg VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)" \
#     --build-arg GIT_SHA="$(git rev-parse HEAD)" .
#
# Stage 1 compiles a release binary against the committed Cargo.lock (--locked), caching the
# dependency build in its own layer so that editing src/ does not recompile every crate, then
# assembles the image's root in /rootfs: the stripped binary, exactly the shared libraries
# ldd names for it, the CA roots (read for rediss:// by the Redis client; everything else
# uses the webpki roots compiled in), /etc/passwd and /etc/group with the user sealrelay
# (65532), and /run/sealrelay (the admin socket's default directory) owned by it.
# Stage 2 is `FROM scratch` with that root and nothing else: no shell, no package manager.
# The process writes nothing to disk but the admin socket, so it runs with a read-only root
# filesystem (the Helm chart mounts an emptyDir at the socket's directory).
# scripts/build-image.sh builds the same layout offline with podman; scripts/check-image.sh
# checks it file by file. docs/image.md has the list.

# The builder, pinned by digest (a tag can be re-pushed, a digest cannot). The digest is the
# one published for docker.io/library/rust:1.95.0-slim-bookworm, the toolchain the project is
# built and tested with (Cargo.toml's rust-version, 1.88, is the oldest the locked crates
# accept). Bump tag and digest together: docker buildx imagetools inspect <tag>.
FROM rust:1.95.0-slim-bookworm@sha256:d7482085ff5b415f84dba5647ae71606650bdef00db7aeb69f4b3d170c3e4082 AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /build
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0 \
    CARGO_NET_RETRY=5

# Dependencies first: stub crates with the real manifests and lock file build every
# dependency of the relay. The layer is reused until a manifest or Cargo.lock changes. The
# workspace's other members (the test kit and the benchmark tools) are present as stubs only
# so the workspace resolves; nothing of theirs is built into the image.
COPY Cargo.toml Cargo.lock ./
COPY crates/testkit/Cargo.toml crates/testkit/
COPY crates/bench/Cargo.toml crates/bench/
# The patched Redis client the root manifest's [patch.crates-io] names (vendor/fred/PATCHES.md).
COPY vendor ./vendor
RUN mkdir -p src crates/testkit/src crates/bench/src/bin \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/testkit/src/lib.rs \
    && for b in relay-bench bench-intake mock-apns; do echo 'fn main() {}' > "crates/bench/src/bin/$b.rs"; done \
    && cargo build --release --locked -p sealrelay \
    && rm -rf src \
        target/release/sealrelay* \
        target/release/deps/sealrelay-* target/release/deps/libsealrelay-* \
        target/release/.fingerprint/sealrelay-*

# The crate itself. Its stub fingerprints were removed above, so it is always rebuilt
# (COPY keeps source mtimes, which may be older than the stub's build).
COPY src ./src
# Build metadata, declared late so that changing it does not invalidate the dependency layer.
# GIT_SHA is reported by the sealrelay_build_info{version,git_sha} metric. VERSION, when
# given (the release workflow passes Cargo.toml's), must equal Cargo.toml's version: the
# binary always reports that one, and the label must not say otherwise.
ARG GIT_SHA=unknown
ARG VERSION=""
ENV SEALRELAY_GIT_SHA=${GIT_SHA}
RUN cargo build --release --locked -p sealrelay \
    && cargo_version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)" \
    && if [ -n "$VERSION" ] && [ "$VERSION" != "$cargo_version" ]; then \
         echo "VERSION=$VERSION but Cargo.toml says $cargo_version" >&2; exit 1; fi \
    && install -D -m 0755 target/release/sealrelay /rootfs/usr/local/bin/sealrelay \
    && strip --strip-all /rootfs/usr/local/bin/sealrelay \
    && /rootfs/usr/local/bin/sealrelay --version \
    && libs="$(ldd /rootfs/usr/local/bin/sealrelay | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)" \
    && test -n "$libs" \
    && for lib in $libs; do install -D -m 0755 "$(readlink -f "$lib")" "/rootfs$lib"; done \
    && install -D -m 0644 /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ca-certificates.crt \
    && printf 'root:x:0:0:root:/root:/sbin/nologin\nsealrelay:x:65532:65532:sealrelay:/nonexistent:/sbin/nologin\n' > /rootfs/etc/passwd \
    && printf 'root:x:0:\nsealrelay:x:65532:\n' > /rootfs/etc/group \
    && chmod 0644 /rootfs/etc/passwd /rootfs/etc/group \
    && install -d -m 0755 /rootfs/run \
    && install -d -m 0700 /rootfs-run/sealrelay

FROM scratch AS runtime
ARG GIT_SHA=unknown
ARG VERSION=""
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /rootfs-run/ /run/
LABEL org.opencontainers.image.title="sealrelay" \
      org.opencontainers.image.description="Push relay: forwards sealed alert ciphertexts to APNs" \
      org.opencontainers.image.source="https://github.com/sealrelay/sealrelay" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_SHA}"
# Numeric so that runAsNonRoot can verify it; the name is in /etc/passwd.
USER 65532:65532
# Public intake (RELAY_LISTEN) and admin listener with /healthz, /readyz, /metrics
# (RELAY_ADMIN_LISTEN).
EXPOSE 8080 9090
# The relay drains on SIGTERM (readiness turns 503 first, then in-flight requests finish).
STOPSIGNAL SIGTERM
# No HEALTHCHECK: the image has no shell or HTTP client; orchestrators probe
# http://<pod>:9090/healthz and /readyz directly.
ENTRYPOINT ["/usr/local/bin/sealrelay"]
CMD ["serve"]
