# syntax=docker/dockerfile:1
#
# sealrelay container image.
#
#   docker build -t sealrelay:dev --build-arg GIT_SHA="$(git rev-parse HEAD)" .
#
# Stage 1 compiles a release binary against the committed Cargo.lock (--locked), caching the
# dependency build in its own layer so that editing src/ does not recompile every crate.
# Stage 2 is distroless (glibc, libgcc, CA certificates, no shell, no package manager) and
# runs as the unprivileged "nonroot" user (65532). The process writes nothing to disk, so
# it runs with a read-only root filesystem.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
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
# Reported by the sealrelay_build_info{version,git_sha} metric.
ARG GIT_SHA=unknown
ENV SEALRELAY_GIT_SHA=${GIT_SHA}
RUN cargo build --release --locked -p sealrelay \
    && install -D -m 0755 target/release/sealrelay /out/sealrelay \
    && /out/sealrelay --version

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
ARG GIT_SHA=unknown
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="sealrelay" \
      org.opencontainers.image.description="Push relay: forwards sealed alert ciphertexts to APNs" \
      org.opencontainers.image.source="https://github.com/sealrelay/sealrelay" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_SHA}"
COPY --from=build /out/sealrelay /usr/local/bin/sealrelay
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot can verify it.
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
