#!/usr/bin/env bash
# scripts/clickhouse-modern.sh: a current ClickHouse (26.9) for the integration
# tests, next to the Debian 18.16 server of scripts/services.sh. No Docker.
#
#   The server is the PyPI wheel chdb-core==26.9.0 (ClickHouse as a library),
#   pinned by sha256, installed with `pip install --no-deps` into the venv
#   build/chdb-26.9.0/. scripts/chdb_server.py starts its HTTP and native
#   listeners and keeps it running (~260 MB RSS, ~5 s to start). It has no
#   HTTPS, and ReplicatedMergeTree tables stay read-only: replication and TLS
#   are tested on 18.16 only.
#
# Usage: scripts/clickhouse-modern.sh <command>
#   up       install if missing, start the server (or reuse the running one),
#            wait until it answers SELECT 1
#   down     stop it (SIGTERM, SIGKILL after 30 s); only the PID in our PID file
#   status   one line; exit 0 only if it runs and answers
#   env      the export lines for build/services.env (services.sh appends them)
#   clean    down, then delete its data
# scripts/services.sh up/down/status/clean call this script.
#
# Files: build/services/clickhouse-modern.pid, build/services/clickhouse-modern/
#   ({config,users}.xml written at each start, data/, server.log)
#
# Environment (defaults):
#   SPATE_CH_MODERN_HOST=127.0.0.1  SPATE_CH_MODERN_HTTP_PORT=8125
#   SPATE_CH_MODERN_TCP_PORT=9004   SPATE_SERVICES_TIMEOUT=60
#   SPATE_CHDB_WHEEL=<file>         use this wheel instead of downloading it
#   SPATE_BUILD_DIR=<repo>/build
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SPATE_BUILD_DIR:-$ROOT/build}"
SVC="$BUILD/services"
TIMEOUT="${SPATE_SERVICES_TIMEOUT:-60}"

CHDB_VERSION=26.9.0
CHDB_PKG="chdb-core==$CHDB_VERSION"
CHDB_WHEEL_NAME="chdb_core-$CHDB_VERSION-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
CHDB_WHEEL_SHA256="707e2ec3fe0f7953bac97942eaeb7a1ed1d66b1e56ecef3f0aa2130f61f6e735"
VENV="$BUILD/chdb-$CHDB_VERSION"
LAUNCHER="$ROOT/scripts/chdb_server.py"

HOST="${SPATE_CH_MODERN_HOST:-127.0.0.1}"
HTTP_PORT="${SPATE_CH_MODERN_HTTP_PORT:-8125}"
TCP_PORT="${SPATE_CH_MODERN_TCP_PORT:-9004}"
DIR="$SVC/clickhouse-modern"
PID_FILE="$SVC/clickhouse-modern.pid"
# what /proc/PID/cmdline must contain for the PID to be ours
MATCH="chdb_server.py --dir $DIR"

log() { printf '[clickhouse-modern] %s\n' "$*" >&2; }
die() { printf '[clickhouse-modern] error: %s\n' "$*" >&2; exit 1; }

answers() {
    python3 - "http://$HOST:$HTTP_PORT" <<'PY' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/?query=SELECT%201", timeout=2) as r:
    sys.exit(0 if r.read().strip() == b"1" else 1)
PY
}

port_in_use() {
    python3 - "$HOST" "$1" <<'PY' >/dev/null 2>&1
import socket, sys
s = socket.socket()
s.settimeout(1)
sys.exit(0 if s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)
PY
}

# our_pid: the PID in PID_FILE if that process is alive, not a zombie, and is
# our launcher for DIR (guards against PID reuse); else nothing.
our_pid() {
    local pid
    [[ -s $PID_FILE ]] || return 0
    pid=$(<"$PID_FILE")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 0
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$MATCH" || return 0
    echo "$pid"
}

install() {
    [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import chdb._chdb' 2>/dev/null && return 0
    [[ $(uname -m) == x86_64 ]] || die "$CHDB_PKG is used for x86_64 Linux only (this is $(uname -m))"
    local wheel="${SPATE_CHDB_WHEEL:-$BUILD/cache/$CHDB_WHEEL_NAME}"
    if [[ ! -s $wheel ]]; then
        python3 -m pip --version >/dev/null 2>&1 || die "pip is missing (apt-get install python3-pip)"
        log "downloading $CHDB_PKG from PyPI (181 MB: ClickHouse $CHDB_VERSION inside)"
        mkdir -p "$BUILD/cache"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --platform manylinux2014_x86_64 \
            "$CHDB_PKG" -d "$BUILD/cache"
        wheel="$BUILD/cache/$CHDB_WHEEL_NAME"
    fi
    [[ -s $wheel ]] || die "wheel not found: $wheel"
    local got
    got=$(sha256sum "$wheel" | cut -d' ' -f1)
    [[ $got == "$CHDB_WHEEL_SHA256" ]] || die "sha256 mismatch for $wheel: $got, expected $CHDB_WHEEL_SHA256"
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        # Debian splits venv/ensurepip off python3
        log "python3 cannot create venvs: installing python3-venv"
        local sudo=""
        [[ $(id -u) == 0 ]] || sudo=sudo
        $sudo apt-get update -q
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv
    fi
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv?)"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps "$wheel"
    "$VENV/bin/python" -c 'import chdb._chdb' || die "chdb._chdb does not import from $VENV"
    log "installed $CHDB_PKG into $VENV"
}

cmd_up() {
    local pid
    pid=$(our_pid)
    if [[ -z $pid ]]; then
        rm -f "$PID_FILE"
        local p
        for p in "$HTTP_PORT" "$TCP_PORT"; do
            port_in_use "$p" && die "port $HOST:$p is taken by a process this script did not start; stop it or set SPATE_CH_MODERN_HTTP_PORT / SPATE_CH_MODERN_TCP_PORT"
        done
        install
        mkdir -p "$DIR"
        # setsid: its own session, so Ctrl-C in the terminal of `make test` doesn't reach it
        (exec setsid "$VENV/bin/python" "$LAUNCHER" --dir "$DIR" --host "$HOST" \
            --http-port "$HTTP_PORT" --tcp-port "$TCP_PORT" \
            </dev/null >"$DIR/server.log" 2>&1) &
        echo $! >"$PID_FILE"
    fi
    local deadline=$((SECONDS + TIMEOUT))
    while ! answers; do
        if [[ -z $(our_pid) ]] && ! kill -0 "$(cat "$PID_FILE" 2>/dev/null)" 2>/dev/null; then
            tail -n 30 "$DIR/server.log" >&2 || true
            die "ClickHouse $CHDB_VERSION exited during start-up (log above)"
        fi
        ((SECONDS < deadline)) || { tail -n 30 "$DIR/server.log" >&2 || true; die "ClickHouse $CHDB_VERSION did not answer within ${TIMEOUT}s"; }
        sleep 0.2
    done
    [[ -n $(our_pid) ]] || die "something else answers on $HOST:$HTTP_PORT"
    log "ClickHouse $CHDB_VERSION: pid $(<"$PID_FILE") on http://$HOST:$HTTP_PORT (native TCP $HOST:$TCP_PORT)"
}

cmd_down() {
    local pid i
    pid=$(our_pid)
    if [[ -z $pid ]]; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        [[ -n $(our_pid) ]] || break
        sleep 0.1
    done
    if [[ -n $(our_pid) ]]; then
        log "pid $pid did not exit within 30 s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    log "stopped (pid $pid)"
}

cmd_status() {
    local pid
    pid=$(our_pid)
    if [[ -n $pid ]] && answers; then
        printf "%-13sup       pid %s  %s  tcp %s\n" ch-26.9 "$pid" "http://$HOST:$HTTP_PORT" "$HOST:$TCP_PORT"
    elif [[ -n $pid ]]; then
        printf '%-13sno-reply pid %s  %s\n' ch-26.9 "$pid" "http://$HOST:$HTTP_PORT"
        return 1
    else
        printf '%-13sdown\n' ch-26.9
        return 1
    fi
}

cmd_env() {
    cat <<ENV
# ClickHouse $CHDB_VERSION (chdb-core wheel), from scripts/clickhouse-modern.sh
export SPATE_TEST_CLICKHOUSE_MODERN_URL=http://$HOST:$HTTP_PORT
export SPATE_TEST_CLICKHOUSE_MODERN_TCP=$HOST:$TCP_PORT
export SPATE_TEST_CLICKHOUSE_MODERN_PID_FILE=$PID_FILE
export SPATE_CH_MODERN_HOST=$HOST
export SPATE_CH_MODERN_HTTP_PORT=$HTTP_PORT
export SPATE_CH_MODERN_TCP_PORT=$TCP_PORT
ENV
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    install) install ;;
    clean) cmd_down; rm -rf "$DIR" ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
