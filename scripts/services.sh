#!/usr/bin/env bash
# scripts/services.sh: the local Kafka broker and ClickHouse servers that spate's
# integration tests and demo run against. No Docker needed.
#
#   Kafka:      nisshi 0.8.1 (a Kafka wire-protocol broker, crates.io), built once
#               per machine into ${SPATE_CACHE_DIR:-/var/cache/spate}/nisshi-0.8.1/
#               (scripts/broker.sh), sqlite storage under build/services/nisshi/.
#               The suite's broker (PLAINTEXT) plus three for the security tests:
#               SSL, SASL_PLAINTEXT and SASL_SSL with SCRAM-SHA-256/512, and
#               mutual TLS through stunnel4 (verify = 2) in front of a plain one.
#   ClickHouse: Debian bookworm's clickhouse-server 18.16 (apt), started by hand
#               with its data under build/services/clickhouse/.
#   Cluster:    three more servers of the same binary, nodes `a` (127.0.0.2), `b`
#               (127.0.0.3) and `c` (127.0.0.4), for sharding/replica tests. All
#               use the same ports (8124 HTTP, 9001 native), as hosts of a real
#               cluster do (Linux routes all of 127/8 to lo), and all load the
#               clusters of deploy/clickhouse-cluster/remote_servers.xml (hosts
#               rewritten to those addresses, port to the native port; c is in
#               none of them: it is the fourth 18.16 server the exactly-once
#               storm needs for two shards of two replicas, with the main one):
#                 spate_two_shards  shard 1 = a, shard 2 = b, weights 1/1
#                 spate_weighted    shard 1 = a weight 1, shard 2 = b weight 3
#                 spate_replicas    one shard, replicas a and b, internal_replication true
#   ClickHouse 26.9: scripts/clickhouse-modern.sh (chdb-core wheel, 127.0.0.1:8125),
#               started/stopped by up/down/status/clean too, its env appended.
#   ClickHouse over HTTPS: scripts/clickhouse-https.sh (18.16 requiring client
#               certificates on 127.0.0.1:8443, stunnel HTTPS without them on
#               8444; test CA and certificates made with openssl), the same way.
#   ZooKeeper:  Debian's zookeeper 3.8 (apt), started by hand (java, no daemon
#               scripts) with its data under build/services/zookeeper/, for the
#               18.16 server's ReplicatedMergeTree tables (exactly-once tests);
#               every 18.16 server (main, nodes a/b/c) gets <zookeeper> in config.d.
#
# Usage: scripts/services.sh <command> [NODE]
#   up         install what is missing, start the Kafka brokers, ClickHouse and
#              cluster nodes a, b and c (or reuse running ones), wait until they
#              answer, write build/services.env
#   down       stop what `up` started (by PID file), SIGKILL after a deadline
#   status     show each; exit 0 only if all run and answer
#   env        print build/services.env (eval "$(scripts/services.sh env)")
#   kafka-kill   SIGKILL the durable broker (a crash)      } for tests that take
#   kafka-stop   stop it (SIGTERM)                         } the broker away;
#   kafka-start  start it again, same storage and port     } messages, offsets kept
#   ch-stop    stop ClickHouse only (data kept)            } for tests that take
#   ch-start   start it again, same data dir and ports    } ClickHouse away
#   ch-pause   SIGSTOP ClickHouse (connections hang)       } mid-run
#   ch-resume  SIGCONT ClickHouse                          }
#   node-stop NODE    the same for cluster node NODE (a, b or c): stop (data kept),
#   node-start NODE   start again (same data dir and ports),
#   node-kill NODE    SIGKILL (a crash; node-start restarts it on the same data),
#   node-pause NODE   SIGSTOP,
#   node-resume NODE  SIGCONT
#   clean      down, then delete build/services/ (ClickHouse data included)
#
# Files (absolute paths are written to build/services.env as well):
#   build/services/nisshi-{plain,durable,tls,scram,scram_tls,mtls}.pid   PIDs of the brokers
#   build/services/nisshi/NAME.{db,log}   a broker's sqlite storage and its log
#   build/services/tls/{ca,server,client}.{crt,key}   the TLS brokers' CA and
#                                   certificate, and the mutual-TLS client's
#   build/services/stunnel-mtls.{conf,pid,log}   the mutual-TLS terminator
#   build/services/clickhouse.pid   PID of clickhouse-server; a test may send it
#                                   SIGSTOP/SIGCONT itself, or call ch-stop/ch-start
#   build/services/clickhouse-{a,b,c}.pid   PIDs of the cluster nodes
#   build/services/clickhouse/log/{server,err,stdout}.log
#   build/services/clickhouse-{a,b,c}/   data and log/ of a node, and etc/: its config
#                                   (the stock config.xml + users.xml, and
#                                   config.d/spate-cluster.xml), rewritten at each start
#   build/services.env              export SPATE_TEST_BROKERS=..., see write_env
#
# Environment (defaults):
#   SPATE_KAFKA_PORT=9092  SPATE_CH_HTTP_PORT=8123  SPATE_CH_TCP_PORT=9000
#   SPATE_KAFKA_TLS_PORT=9093  SPATE_KAFKA_SCRAM_PORT=9094  SPATE_KAFKA_SCRAM_TLS_PORT=9095
#   SPATE_KAFKA_MTLS_PORT=9097 (stunnel)  SPATE_KAFKA_MTLS_BACKEND_PORT=9098 (its broker)
#   SPATE_CH_INTERSERVER_PORT=9009   (distinct per server when several run on one host)
#   SPATE_CH_CLUSTER_HTTP_PORT=8124  SPATE_CH_CLUSTER_TCP_PORT=9001
#   SPATE_CH_CLUSTER_INTERSERVER_PORT=9010   ports of nodes a, b, c (each on its address)
#   SPATE_ZK_PORT=2181               ZooKeeper's client port (127.0.0.1)
#   SPATE_SERVICES_TIMEOUT=60        seconds to wait for each service to answer
#   SPATE_CACHE_DIR=/var/cache/spate where the nisshi build is cached (per machine)
#   SPATE_KAFKA_STORAGE=memory       or sqlite: the suite broker's storage (see broker.sh)
#   SPATE_KAFKA_DURABLE_STORAGE=sqlite  or memory: the durable broker forgets (restart test fails)
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
HTTPS="$ROOT/scripts/clickhouse-https.sh"    # 18.16 over HTTPS (+ stunnel)

KAFKA_HOST=127.0.0.1
KAFKA_PORT="${SPATE_KAFKA_PORT:-9092}"
CH_HTTP_PORT="${SPATE_CH_HTTP_PORT:-8123}"
CH_TCP_PORT="${SPATE_CH_TCP_PORT:-9000}"
CH_INTERSERVER_PORT="${SPATE_CH_INTERSERVER_PORT:-9009}"
TIMEOUT="${SPATE_SERVICES_TIMEOUT:-60}"

CH_PID="$SVC/clickhouse.pid"
CH_DIR="$SVC/clickhouse"
CH_CONFIG="/etc/clickhouse-server/config.xml"

# Cluster nodes: name -> address; all use the same ports. The order is that of
# SPATE_TEST_CLUSTER_URLS: tests that need two nodes take the first two (a, b);
# c comes last so that they are unaffected by it.
CH_NODES=(a b c)
declare -A CH_NODE_HOST=([a]=127.0.0.2 [b]=127.0.0.3 [c]=127.0.0.4)
CH_CLUSTER_HTTP_PORT="${SPATE_CH_CLUSTER_HTTP_PORT:-8124}"
CH_CLUSTER_TCP_PORT="${SPATE_CH_CLUSTER_TCP_PORT:-9001}"
CH_CLUSTER_INTERSERVER_PORT="${SPATE_CH_CLUSTER_INTERSERVER_PORT:-9010}"
# The clusters, as docker-compose mounts them (hosts clickhouse-a/-b, port 9000).
CH_CLUSTER_XML="$ROOT/deploy/clickhouse-cluster/remote_servers.xml"

ZK_PORT="${SPATE_ZK_PORT:-2181}"
ZK_DIR="$SVC/zookeeper"
ZK_PID="$SVC/zookeeper.pid"
ZK_JAR=/usr/share/java/zookeeper.jar

LOG_TAG=services
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/broker.sh
source "$ROOT/scripts/broker.sh"

# ------------------------------------------------------------- install ----
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

# ----------------------------------------------------------- zookeeper ----
# ZooKeeper for ReplicatedMergeTree on the 18.16 server, in functions of its own:
# install_zookeeper, zk_up, zk_down, zk_status, zk_env.
install_zookeeper() {
    [[ -s $ZK_JAR ]] && command -v java >/dev/null && return 0
    log "installing zookeeper from Debian (apt-get)"
    as_root apt-get update -q || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends zookeeper ||
        die "apt-get install zookeeper failed"
    [[ -s $ZK_JAR ]] || die "$ZK_JAR still missing after install"
}

# zk_answers: ZooKeeper is up and serving sessions. `ruok` says imok as soon as
# the process listens, before it serves (loading its data, the 18.16 server's
# handshake then fails and a server with Replicated tables exits at start);
# `srvr` names the Mode only once it serves.
zk_answers() {
    local reply
    reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf ruok >&3; cat <&3" 2>/dev/null) || return 1
    [[ $reply == imok ]] || return 1
    reply=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf srvr >&3; cat <&3" 2>/dev/null) || return 1
    [[ $reply == *"Mode: "* ]]
}

zk_up() {
    install_zookeeper
    if [[ -n $(pid_of "$ZK_PID" QuorumPeerMain) ]]; then
        log "zookeeper: reusing pid $(<"$ZK_PID") on 127.0.0.1:$ZK_PORT"
        return 0
    fi
    port_in_use 127.0.0.1 "$ZK_PORT" && die "port 127.0.0.1:$ZK_PORT is taken by a process this script did not start; stop it or set SPATE_ZK_PORT"
    mkdir -p "$ZK_DIR/conf" "$ZK_DIR/data"
    cat >"$ZK_DIR/conf/zoo.cfg" <<EOF
# written by scripts/services.sh
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
EOF
    (cd "$ZK_DIR" && exec setsid java -Xmx256m -cp "$ZK_DIR/conf:$ZK_JAR" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/conf/zoo.cfg" \
        </dev/null >"$ZK_DIR/stdout.log" 2>&1) &
    echo $! >"$ZK_PID"
    local i
    for ((i = 0; i < TIMEOUT * 5; i++)); do
        zk_answers && { log "zookeeper: pid $(<"$ZK_PID") on 127.0.0.1:$ZK_PORT"; return 0; }
        [[ -n $(pid_of "$ZK_PID" QuorumPeerMain) ]] || die "zookeeper exited; see $ZK_DIR/stdout.log"
        sleep 0.2
    done
    die "zookeeper did not answer within ${TIMEOUT}s; see $ZK_DIR/stdout.log"
}

zk_down() {
    stop_pid "$ZK_PID" QuorumPeerMain "zookeeper"
}

zk_status() {
    local pid
    pid=$(pid_of "$ZK_PID" QuorumPeerMain)
    if [[ -n $pid ]] && zk_answers; then
        printf '%-13sup       pid %s  127.0.0.1:%s\n' zookeeper "$pid" "$ZK_PORT"
    elif [[ -n $pid ]]; then
        printf '%-13sno-reply pid %s  127.0.0.1:%s\n' zookeeper "$pid" "$ZK_PORT"
        return 1
    else
        printf '%-13sdown\n' zookeeper
        return 1
    fi
}

# zk_ch_config: the main server's config dir $CH_DIR/etc: the stock config.xml
# and its users file, plus config.d/spate-zookeeper.xml naming our ZooKeeper
# (ReplicatedMergeTree on 18.16). Paths and ports come from the command line.
zk_ch_config() {
    local src etc="$CH_DIR/etc" users d
    src=$(dirname "$CH_CONFIG")
    rm -rf "$etc"
    mkdir -p "$etc/config.d"
    cp "$CH_CONFIG" "$etc/config.xml"
    users=$(sed -n 's:.*<users_config>[[:space:]]*\([^<[:space:]]*\)[[:space:]]*</users_config>.*:\1:p;T;q' "$CH_CONFIG")
    [[ -n $users && $users != /* ]] && cp "$src/$users" "$etc/"
    for d in config.d conf.d users.d; do
        [[ -d $src/$d ]] && cp -r "$src/$d/." "$etc/$d/"
    done
    zk_xml >"$etc/config.d/spate-zookeeper.xml"
}

# zk_xml: the <zookeeper> section every 18.16 server gets (the main server and
# cluster nodes a/b/c, whose shards are ReplicatedMergeTree in the exactly-once
# sharding test), so each shard deduplicates replayed blocks.
zk_xml() {
    cat <<EOF
<!-- written by scripts/services.sh: the ZooKeeper of ReplicatedMergeTree tables -->
<yandex>
    <zookeeper>
        <node index="1"><host>127.0.0.1</host><port>$ZK_PORT</port></node>
    </zookeeper>
</yandex>
EOF
}

zk_env() {
    echo "export SPATE_TEST_ZK_ADDR=127.0.0.1:$ZK_PORT"
    echo "export SPATE_ZK_PORT=$ZK_PORT"
}

# --------------------------------------------------------------- start ----
# ch_select SERVER: point the S_* variables at one ClickHouse server: `main` (the
# one SPATE_TEST_CLICKHOUSE_URL names) or a cluster node (a, b, c).
ch_select() {
    case $1 in
        main)
            S_LABEL=ClickHouse S_PROC=clickhouse-server S_MATCH=clickhouse-server
            S_DIR=$CH_DIR S_PID=$CH_PID S_CONFIG=$CH_DIR/etc/config.xml S_HOST=127.0.0.1
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
    zk_xml >"$etc/config.d/spate-zookeeper.xml"
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
    else
        zk_ch_config
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
$(kafka_env)
export SPATE_TEST_CLICKHOUSE_URL=http://127.0.0.1:$CH_HTTP_PORT
export SPATE_TEST_CLICKHOUSE_TCP=127.0.0.1:$CH_TCP_PORT
export SPATE_TEST_CLICKHOUSE_PID_FILE=$CH_PID
export SPATE_SERVICES_SH=$SELF
# the cluster nodes (HTTP URLs, node a first) and their names for services.sh node-*
export SPATE_TEST_CLUSTER_URLS=$(cluster_urls)
export SPATE_TEST_CLUSTER_NODES=$(IFS=,; echo "${CH_NODES[*]}")
# what scripts/services.sh itself reads, so ch-stop/ch-start from a test hit the same server
export SPATE_BUILD_DIR=$BUILD
$(kafka_port_env)
$(zk_env)
export SPATE_CH_HTTP_PORT=$CH_HTTP_PORT
export SPATE_CH_TCP_PORT=$CH_TCP_PORT
export SPATE_CH_INTERSERVER_PORT=$CH_INTERSERVER_PORT
export SPATE_CH_CLUSTER_HTTP_PORT=$CH_CLUSTER_HTTP_PORT
export SPATE_CH_CLUSTER_TCP_PORT=$CH_CLUSTER_TCP_PORT
export SPATE_CH_CLUSTER_INTERSERVER_PORT=$CH_CLUSTER_INTERSERVER_PORT
EOF
    "$MODERN" env >>"$ENV_FILE.tmp"
    "$HTTPS" env >>"$ENV_FILE.tmp"
    mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# ------------------------------------------------------------ commands ----
cmd_up() {
    need_python
    local t0=$SECONDS n
    install_nisshi
    install_clickhouse
    mkdir -p "$SVC"
    kafka_up
    zk_up
    ch_start main
    for n in "${CH_NODES[@]}"; do ch_spawn "$n"; done
    for n in "${CH_NODES[@]}"; do ch_wait "$n"; done
    "$MODERN" up
    "$HTTPS" up
    write_env
    log "ready in $((SECONDS - t0)) s; env in $ENV_FILE:"
    grep '^export SPATE_TEST_' "$ENV_FILE" | sed 's/^export /  /' >&2
}

cmd_down() {
    local n
    # side by side: each may take seconds to exit (clickhouse-server waits for
    # open connections)
    kafka_down &
    ch_stop main &
    for n in "${CH_NODES[@]}"; do ch_stop "$n" & done
    "$MODERN" down &
    "$HTTPS" down &
    wait
    # after the server that uses it
    zk_down
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
    kafka_status || ok=1
    zk_status || ok=1
    ch_status main clickhouse || ok=1
    for n in "${CH_NODES[@]}"; do ch_status "$n" "clickhouse-$n" || ok=1; done
    "$MODERN" status || ok=1
    "$HTTPS" status || ok=1
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
    kafka-kill) kafka_kill ;;
    kafka-stop) stop_pid "$KAFKA_DURABLE_PID" "$(kb_match durable)" "Kafka durable (nisshi)" ;;
    kafka-start) need_python; install_nisshi; mkdir -p "$SVC"; kb_start durable ;;
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
