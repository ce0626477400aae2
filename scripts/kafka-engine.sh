#!/usr/bin/env bash
# scripts/kafka-engine.sh: an extra ClickHouse server for benchmarking ClickHouse's
# own Kafka table engine (ENGINE = Kafka + MATERIALIZED VIEW) against spate.
#
# Why an extra server: Debian's clickhouse-server 18.16 links the system
# librdkafka 2.0.2, which cannot talk to the tansu broker: it fails to parse
# tansu's ApiVersions v3 reply ("Protocol read buffer underflow for ApiVersion v3
# at 274/279 ... ApiVersionRequest failed: Local: Read underflow"), marks the
# broker down and retries for ever. So this script builds librdkafka 2.12.1 (the
# source rdkafka-sys 4.10.0+2.12.1 ships in cargo's registry, the same version
# spate itself uses) as a shared library and starts a second clickhouse-server
# with LD_LIBRARY_PATH pointing at it (librdkafka.so.1 is ABI-stable). The
# shared servers of scripts/services.sh are never touched.
#
# Usage: scripts/kafka-engine.sh <command>
#   build   build build/librdkafka-2.12/lib/librdkafka.so.1 if missing (~35 s on 2 cores)
#   up      build if needed, start the server (or reuse a running one), wait until
#           it answers, print   export KAFKA_ENGINE_CH_URL=... lines on stdout
#   down    stop it (SIGTERM, SIGKILL after 30 s); data dir kept
#   status  exit 0 if it runs and answers
#   env     print the export lines of a running server
#   clean   down, then delete build/kafka-engine/ (its data)
#
# Files: build/librdkafka-2.12/lib/librdkafka.so.1 (+ BUILD_INFO),
#        build/kafka-engine/{etc,log,data...}, build/kafka-engine/clickhouse.pid,
#        logs: build/kafka-engine/log/{server,err,stdout}.log (librdkafka logs to stdout.log)
#
# Environment (defaults):
#   KAFKA_ENGINE_HTTP_PORT=8135 KAFKA_ENGINE_TCP_PORT=9035 KAFKA_ENGINE_INTERSERVER_PORT=9036
#   KAFKA_ENGINE_TIMEOUT=60          seconds to wait for the server to answer
#   KAFKA_ENGINE_LIBRDKAFKA=built    built: librdkafka 2.12.1 from cargo's registry;
#                                    system: Debian's 2.0.2 with api.version.request=false
#                                    + broker.version.fallback=0.9.0; for diagnosis only:
#                                    it connects, but a new group fails on tansu's
#                                    ListOffsets v0 reply ("Read underflow", no rows)
#   KAFKA_ENGINE_RDKAFKA_DEBUG=      librdkafka `debug` contexts (e.g. cgrp,fetch), to stdout.log
#   KAFKA_ENGINE_MIN_INSERT_ROWS=65536  min_insert_block_size_rows of the default profile
#                                    (the view's INSERT squashes blocks up to it before a
#                                    part is written); `stock`: 18.16's 1048576
#   SPATE_BUILD_DIR=<repo>/build
#   CARGO_HOME=~/.cargo              where the registry source is looked for
#
# Fresh machine: needs clickhouse-server (scripts/services.sh up installs it), a C
# compiler and make (apt-get install -y gcc make; zlib1g-dev optional), cargo
# (for `cargo fetch` when the source is not in the registry yet), python3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SPATE_BUILD_DIR:-$ROOT/build}"
DIR="$BUILD/kafka-engine"
PID_FILE="$DIR/clickhouse.pid"
LIB_DIR="$BUILD/librdkafka-2.12"
LIB="$LIB_DIR/lib/librdkafka.so.1"
RDKAFKA_SYS="rdkafka-sys-4.10.0+2.12.1"
HOST=127.0.0.1
HTTP_PORT="${KAFKA_ENGINE_HTTP_PORT:-8135}"
TCP_PORT="${KAFKA_ENGINE_TCP_PORT:-9035}"
INTERSERVER_PORT="${KAFKA_ENGINE_INTERSERVER_PORT:-9036}"
TIMEOUT="${KAFKA_ENGINE_TIMEOUT:-60}"
MODE="${KAFKA_ENGINE_LIBRDKAFKA:-built}"
CH_CONFIG=/etc/clickhouse-server/config.xml
URL="http://$HOST:$HTTP_PORT"

LOG_TAG=kafka-engine
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

case $MODE in built | system) ;; *) die "KAFKA_ENGINE_LIBRDKAFKA must be built or system, not '$MODE'" ;; esac

# our_pid: the PID in PID_FILE if that process is alive, not a zombie, and is a
# clickhouse-server with our data dir on its command line; else nothing.
our_pid() {
    pid_of "$PID_FILE" "--path=$DIR/"
}

# ------------------------------------------------------------- librdkafka ----
find_source() {
    local cargo_home="${CARGO_HOME:-$HOME/.cargo}" d
    for d in "$cargo_home"/registry/src/*/"$RDKAFKA_SYS"/librdkafka; do
        [[ -x $d/configure && -f $d/src/rdkafka.h ]] && { echo "$d"; return 0; }
    done
    return 1
}

build_lib() {
    if [[ -s $LIB && -s $LIB_DIR/BUILD_INFO ]]; then
        return 0
    fi
    local src t0=$SECONDS
    if ! src=$(find_source); then
        command -v cargo >/dev/null 2>&1 || die "$RDKAFKA_SYS not in cargo's registry and cargo not found"
        log "fetching crates (cargo fetch) for the $RDKAFKA_SYS source"
        (cd "$ROOT" && timeout 600 cargo fetch --locked) || die "cargo fetch failed"
        src=$(find_source) || die "$RDKAFKA_SYS/librdkafka not found under ${CARGO_HOME:-$HOME/.cargo}/registry/src after cargo fetch"
    fi
    command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 ||
        die "a C compiler and make are needed: apt-get install -y gcc make"
    log "building librdkafka 2.12.1 (shared) from $src"
    local work="$LIB_DIR/src"
    rm -rf "$work" "$LIB_DIR/lib"
    mkdir -p "$LIB_DIR/lib"
    mkdir -p "$work"
    cp -a "$src/." "$work/"
    chmod -R u+w "$work"
    # plaintext, no compression libs beyond zlib (optional) and the built-in
    # lz4/snappy: what the tansu broker and spate gen need. mklove, no cmake.
    local flags=(--disable-ssl --disable-gssapi --disable-sasl --disable-zstd --disable-curl
        --disable-lz4-ext --disable-regex-ext --disable-c11threads)
    (cd "$work" && timeout 300 ./configure --prefix="$LIB_DIR" "${flags[@]}") >"$LIB_DIR/configure.log" 2>&1 ||
        { tail -n 30 "$LIB_DIR/configure.log" >&2; die "librdkafka configure failed (log: $LIB_DIR/configure.log)"; }
    (cd "$work/src" && timeout 900 make -j"$(nproc)" librdkafka.so.1) >"$LIB_DIR/make.log" 2>&1 ||
        { tail -n 30 "$LIB_DIR/make.log" >&2; die "librdkafka make failed (log: $LIB_DIR/make.log)"; }
    cp "$work/src/librdkafka.so.1" "$LIB.tmp"
    mv "$LIB.tmp" "$LIB"
    check_symbols
    {
        echo "librdkafka 2.12.1 from $src"
        echo "configure ${flags[*]}"
        echo "built $(date -u +%FT%TZ) in $((SECONDS - t0)) s"
    } >"$LIB_DIR/BUILD_INFO"
    rm -rf "$work"
    log "built $LIB in $((SECONDS - t0)) s"
}

# check_symbols: every rd_kafka_* symbol that ClickHouse's library imports must be
# exported by the built librdkafka (skipped without nm).
check_symbols() {
    command -v nm >/dev/null 2>&1 || return 0
    local bin chlib missing
    bin=$(ch_server_bin)
    [[ -n $bin ]] || return 0
    chlib=$(ldd "$bin" 2>/dev/null | awk '/libclickhouse/ {print $3}')
    [[ -n $chlib ]] || chlib=$bin
    missing=$(comm -23 \
        <(nm -D --undefined-only "$chlib" | awk '{print $2}' | sed 's/@.*//' | grep '^rd_kafka' | sort -u) \
        <(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//' | sort -u))
    [[ -z $missing ]] || { rm -f "$LIB"; die "built librdkafka lacks symbols ClickHouse needs: $missing"; }
}

# ------------------------------------------------------------------ server ----
write_config() {
    local etc="$DIR/etc" src users
    src=$(dirname "$CH_CONFIG")
    rm -rf "$etc"
    mkdir -p "$etc/config.d"
    cp "$CH_CONFIG" "$etc/config.xml"
    users=$(sed -n 's:.*<users_config>[[:space:]]*\([^<[:space:]]*\)[[:space:]]*</users_config>.*:\1:p;T;q' "$CH_CONFIG")
    [[ -n $users && $users != /* ]] && cp "$src/$users" "$etc/"
    local extra=""
    if [[ $MODE == system ]]; then
        # Debian's 2.0.2 cannot parse tansu's ApiVersions v3 reply; without the
        # ApiVersions request (fallback < 0.10 keeps it off) it uses old versions,
        # and then cannot parse tansu's ListOffsets v0 reply either: consumes
        # only for groups with committed offsets. Kept to show the failure.
        extra+="        <api_version_request>false</api_version_request>
        <broker_version_fallback>0.9.0</broker_version_fallback>
"
    fi
    [[ -n ${KAFKA_ENGINE_RDKAFKA_DEBUG:-} ]] && extra+="        <debug>$KAFKA_ENGINE_RDKAFKA_DEBUG</debug>
"
    # Global librdkafka consumer properties for every Kafka table (<kafka>, with
    # '_' for '.'): read from the start of a topic for a new group (librdkafka's
    # default is the end), and a short session timeout because tansu completes a
    # group join only after session.timeout.ms/2 (librdkafka's default 45 s).
    # The view's INSERT squashes the engine's blocks (kafka_max_block_size, default
    # max_block_size = 65536 rows) up to min_insert_block_size_rows (1048576) before
    # writing a part, so count() of the target moves in steps of ~1M rows, or at
    # the end of a stream (stream_flush_interval_ms, 7.5 s, or an empty poll): no
    # steady rate can be sampled below a few million rows. The Kafka engine
    # inserts with the global context, i.e. the default profile: lower it there
    # (KAFKA_ENGINE_MIN_INSERT_ROWS; `stock` keeps 18.16's default).
    local min_rows="${KAFKA_ENGINE_MIN_INSERT_ROWS:-65536}"
    mkdir -p "$etc/users.d"
    if [[ $min_rows != stock ]]; then
        [[ $min_rows =~ ^[0-9]+$ ]] || die "KAFKA_ENGINE_MIN_INSERT_ROWS must be a number or stock"
        cat >"$etc/users.d/kafka-engine.xml" <<EOF
<!-- written by scripts/kafka-engine.sh -->
<yandex>
    <profiles>
        <default>
            <min_insert_block_size_rows>$min_rows</min_insert_block_size_rows>
        </default>
    </profiles>
</yandex>
EOF
    fi
    cat >"$etc/config.d/kafka.xml" <<EOF
<!-- written by scripts/kafka-engine.sh (librdkafka: $MODE) -->
<yandex>
    <kafka>
        <auto_offset_reset>smallest</auto_offset_reset>
        <session_timeout_ms>6000</session_timeout_ms>
        <heartbeat_interval_ms>1000</heartbeat_interval_ms>
$extra    </kafka>
</yandex>
EOF
}

print_env() {
    local pid=$1
    echo "export KAFKA_ENGINE_CH_URL=$URL"
    echo "export KAFKA_ENGINE_CH_TCP=$HOST:$TCP_PORT"
    echo "export KAFKA_ENGINE_CH_PID=$pid"
    echo "export KAFKA_ENGINE_CH_PID_FILE=$PID_FILE"
    echo "export KAFKA_ENGINE_LIBRDKAFKA=$(grep -o '/[^ ]*librdkafka\.so[^ ]*' "/proc/$pid/maps" 2>/dev/null | head -n1)"
    echo "export KAFKA_ENGINE_LOG_DIR=$DIR/log"
}

cmd_up() {
    need_python
    local bin pid
    bin=$(ch_server_bin)
    [[ -n $bin && -f $CH_CONFIG ]] || die "clickhouse-server not installed: run scripts/services.sh up (or make services) first"
    pid=$(our_pid)
    if [[ -n $pid ]]; then
        wait_until "running clickhouse-server pid $pid" "$PID_FILE" "--path=$DIR/" "$DIR/log/err.log" -- ch_answers "$URL"
        log "reusing pid $pid on $URL"
        print_env "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    local ld=""
    if [[ $MODE == built ]]; then
        build_lib
        ld="$LIB_DIR/lib"
    fi
    local p
    for p in "$HTTP_PORT" "$TCP_PORT" "$INTERSERVER_PORT"; do
        port_in_use "$HOST" "$p" && die "port $HOST:$p is taken by a process this script did not start; set KAFKA_ENGINE_*_PORT"
    done
    mkdir -p "$DIR/log" "$DIR/tmp" "$DIR/user_files" "$DIR/format_schemas"
    write_config
    (cd "$DIR" && exec env ${ld:+LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} \
        setsid "$bin" --config-file="$DIR/etc/config.xml" -- \
        --path="$DIR/" \
        --tmp_path="$DIR/tmp/" \
        --user_files_path="$DIR/user_files/" \
        --format_schema_path="$DIR/format_schemas/" \
        --http_port="$HTTP_PORT" \
        --tcp_port="$TCP_PORT" \
        --interserver_http_port="$INTERSERVER_PORT" \
        --listen_host="$HOST" \
        --logger.log="$DIR/log/server.log" \
        --logger.errorlog="$DIR/log/err.log" \
        </dev/null >"$DIR/log/stdout.log" 2>&1) &
    echo $! >"$PID_FILE"
    wait_until clickhouse-server "$PID_FILE" "--path=$DIR/" "$DIR/log/stdout.log" "$DIR/log/err.log" -- ch_answers "$URL"
    pid=$(<"$PID_FILE")
    if [[ $MODE == built ]] && ! grep -q -- "$LIB" "/proc/$pid/maps"; then
        die "pid $pid did not load $LIB (check ldd $bin)"
    fi
    log "clickhouse-server pid $pid on $URL (native $HOST:$TCP_PORT), librdkafka: $MODE"
    print_env "$pid"
}

cmd_down() {
    stop_pid "$PID_FILE" "--path=$DIR/" clickhouse-server
}

cmd_status() {
    local pid
    pid=$(our_pid)
    if [[ -n $pid ]] && ch_answers "$URL"; then
        echo "kafka-engine up  pid $pid  $URL"
    elif [[ -n $pid ]]; then
        echo "kafka-engine no-reply  pid $pid  $URL"
        return 1
    else
        echo "kafka-engine down"
        return 1
    fi
}

cmd_env() {
    local pid
    pid=$(our_pid)
    [[ -n $pid ]] || die "not running: scripts/kafka-engine.sh up"
    print_env "$pid"
}

case "${1:-}" in
    build) build_lib ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    clean) cmd_down; rm -rf "$DIR" ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
