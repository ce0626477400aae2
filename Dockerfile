# syntax=docker/dockerfile:1
# spate: one self-contained binary (librdkafka, OpenSSL, zlib, zstd and libcurl
# are linked in statically), run as a non-root user.
#   docker build -t spate .
#   docker run --rm spate --help

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
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p spate \
 && install -m 0755 target/release/spate /usr/local/bin/spate

FROM debian:bookworm-slim
# spate links only glibc (libc, libm) and libgcc_s dynamically.
# ca-certificates: https:// ClickHouse URLs and Kafka over TLS. The vendored
# OpenSSL looks for roots under /usr/local/ssl; SSL_CERT_FILE points it at
# Debian's bundle instead (OIDC token endpoints: -X https.ca.location=probe).
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin spate
COPY --from=build /usr/local/bin/spate /usr/local/bin/spate
USER spate:spate
ENTRYPOINT ["spate"]
CMD ["--help"]
