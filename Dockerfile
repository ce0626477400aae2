# syntax=docker/dockerfile:1
# spate: one self-contained binary (librdkafka, OpenSSL, zlib, zstd and libcurl
# are linked in statically), stripped, on a distroless base, run as a non-root
# user. docs/deploying.md, "Container image", says what is in it.
#   docker build -t spate .
#   docker run --rm spate --help
#   docker run -d spate run --brokers kafka:9092 --topic events --group spate \
#       --clickhouse-url http://clickhouse:8123 --table default.events

FROM rust:1-bookworm AS build
# rdkafka-sys builds the bundled librdkafka with its own ./configure + make,
# python3 for librdkafka's Makefile; perl for OpenSSL's Configure (vendored
# OpenSSL); zlib, zstd and libcurl come from the crates' own sources.
# libcurl4-openssl-dev only satisfies librdkafka's configure link check for
# libcurl (OIDC); the binary links the static libcurl (see .ci/run).
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential perl python3 libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The release profile keeps line tables for profiling (125 MB); the image
# gets the binary without debug info and symbols (about 20 MB).
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p spate \
 && install -m 0755 target/release/spate /usr/local/bin/spate

# The same binary on Debian slim, with a shell: for scripted use, such as
# docker-compose's gen-secure (`docker build --target shell`).
FROM debian:bookworm-slim AS shell
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/spate /usr/local/bin/spate
USER 10001:10001
ENTRYPOINT ["spate"]

# The image: distroless "cc", i.e. glibc, libgcc_s and CA certificates, no
# shell, no package manager. spate links only glibc (libc, libm) and libgcc_s
# dynamically.
FROM gcr.io/distroless/cc-debian12
# The vendored OpenSSL looks for roots under /usr/local/ssl; SSL_CERT_FILE
# points it at the image's bundle instead (https:// ClickHouse URLs, Kafka
# over TLS; OIDC token endpoints: -X https.ca.location=probe).
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    SPATE_ADMIN_ADDR=0.0.0.0:9187
COPY --from=build /usr/local/bin/spate /usr/local/bin/spate
# A numeric user (no entry in /etc/passwd needed), so that Kubernetes'
# runAsNonRoot can verify it; deploy/kubernetes uses the same uid.
USER 10001:10001
# /metrics, /healthz, /readyz (SPATE_ADMIN_ADDR above; --admin-addr overrides).
EXPOSE 9187
# No curl in the image: spate asks its own admin server. /healthz fails only
# when a pipeline thread stalls (a ClickHouse outage is /readyz's business).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["spate", "probe", "--url=http://127.0.0.1:9187/healthz"]
ENTRYPOINT ["spate"]
CMD ["--help"]
