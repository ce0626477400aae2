# syntax=docker/dockerfile:1
# spate: one static-ish binary (librdkafka is linked in), run as a non-root user.
#   docker build -t spate .
#   docker run --rm spate --help

FROM rust:1-bookworm AS build
# rdkafka-sys builds the bundled librdkafka with its own ./configure + make;
# zlib1g-dev/pkg-config for the "libz" feature, python3 for librdkafka's Makefile.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config python3 zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p spate \
 && install -m 0755 target/release/spate /usr/local/bin/spate

FROM debian:bookworm-slim
# ca-certificates: https:// ClickHouse URLs. zlib1g (libz.so.1) is already in the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin spate
COPY --from=build /usr/local/bin/spate /usr/local/bin/spate
USER spate:spate
ENTRYPOINT ["spate"]
CMD ["--help"]
