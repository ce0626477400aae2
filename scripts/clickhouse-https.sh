#!/usr/bin/env bash
# scripts/clickhouse-https.sh: ClickHouse over HTTPS for the TLS tests, started
# and stopped by scripts/services.sh (up/down/status/env), or on its own.
#
#   mtls    Debian's clickhouse-server 18.16, its own data dir
#           (build/services/clickhouse-https/), serving
#             HTTPS  127.0.0.1:SPATE_CH_HTTPS_PORT (8443), client certificates
#                    required (<verificationMode>strict</verificationMode>,
#                    <caConfig> the test CA)
#             HTTP   127.0.0.1:SPATE_CH_HTTPS_HTTP_PORT (8126), the same server
#                    in plain text (the bench's HTTPS/HTTP ratio)
#             native 127.0.0.1:SPATE_CH_HTTPS_TCP_PORT (9440)
#             interserver SPATE_CH_HTTPS_INTERSERVER_PORT (9011)
#           users: `default` (no password) and SPATE_CH_HTTPS_USER (spate_tls)
#           with the password in build/services/ch-tls/password.
#   tls     stunnel4 on 127.0.0.1:SPATE_CH_HTTPS_STUNNEL_PORT (8444): HTTPS with
#           no client certificate asked (verify = 0), in front of the HTTP port
#           above: the ClickHouse Cloud case (server authentication only).
#
# Certificates (scripts/lib.sh tls_make_certs) in build/services/ch-tls/:
# ca.crt, server.{crt,key} (127.0.0.1/localhost), client.{crt,key}, other-ca.crt.
#
# Usage: scripts/clickhouse-https.sh up|down|status|env
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SPATE_BUILD_DIR:-$ROOT/build}"
SVC="$BUILD/services"
TIMEOUT="${SPATE_SERVICES_TIMEOUT:-60}"
LOG_TAG=clickhouse-https
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

HOST=127.0.0.1
HTTPS_PORT="${SPATE_CH_HTTPS_PORT:-8443}"
HTTP_PORT="${SPATE_CH_HTTPS_HTTP_PORT:-8126}"
TCP_PORT="${SPATE_CH_HTTPS_TCP_PORT:-9440}"
INTERSERVER_PORT="${SPATE_CH_HTTPS_INTERSERVER_PORT:-9011}"
STUNNEL_PORT="${SPATE_CH_HTTPS_STUNNEL_PORT:-8444}"
USER_NAME="${SPATE_CH_HTTPS_USER:-spate_tls}"

DIR="$SVC/clickhouse-https"
CERTS="$SVC/ch-tls"
PID="$SVC/clickhouse-https.pid"
MATCH="--path=$DIR/"
STUNNEL_PID="$SVC/stunnel-ch.pid"
STUNNEL_CONF="$SVC/stunnel-ch.conf"
STOCK_CONFIG=/etc/clickhouse-server/config.xml

# the password of USER_NAME: random, made once, kept in a file (a test secret)
password() {
    [[ -s $CERTS/password ]] || { mkdir -p "$CERTS"; python3 -c 'import secrets; print("pw-" + secrets.token_hex(12))' >"$CERTS/password"; }
    cat "$CERTS/password"
}

# the server's config dir: the stock config and users, plus HTTPS and the user
write_config() {
    local etc=$DIR/etc src users pw
    src=$(dirname "$STOCK_CONFIG")
    rm -rf "$etc"
    mkdir -p "$etc/config.d" "$etc/users.d"
    cp "$STOCK_CONFIG" "$etc/config.xml"
    users=$(sed -n 's:.*<users_config>[[:space:]]*\([^<[:space:]]*\)[[:space:]]*</users_config>.*:\1:p;T;q' "$STOCK_CONFIG")
    [[ -n $users && $users != /* ]] && cp "$src/$users" "$etc/"
    pw=$(password)
    cat >"$etc/config.d/spate-https.xml" <<EOF
<?xml version="1.0"?>
<!-- written by scripts/clickhouse-https.sh -->
<yandex>
    <https_port>$HTTPS_PORT</https_port>
    <openSSL>
        <server>
            <certificateFile>$CERTS/server.crt</certificateFile>
            <privateKeyFile>$CERTS/server.key</privateKeyFile>
            <dhParamsFile></dhParamsFile>
            <caConfig>$CERTS/ca.crt</caConfig>
            <verificationMode>strict</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <cacheSessions>true</cacheSessions>
            <disableProtocols>sslv2,sslv3</disableProtocols>
            <preferServerCiphers>true</preferServerCiphers>
        </server>
    </openSSL>
</yandex>
EOF
    cat >"$etc/users.d/spate-https-user.xml" <<EOF
<?xml version="1.0"?>
<!-- written by scripts/clickhouse-https.sh -->
<yandex>
    <users>
        <$USER_NAME>
            <password>$pw</password>
            <networks><ip>::/0</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </$USER_NAME>
    </users>
</yandex>
EOF
}

ch_https_spawn() {
    if [[ -n $(pid_of "$PID" "$MATCH") ]]; then
        log "reusing pid $(<"$PID")"
        return 0
    fi
    rm -f "$PID"
    local p
    for p in "$HTTPS_PORT" "$HTTP_PORT" "$TCP_PORT" "$INTERSERVER_PORT"; do
        port_in_use "$HOST" "$p" && die "port $HOST:$p is taken by a process this script did not start; set SPATE_CH_HTTPS_PORT / SPATE_CH_HTTPS_HTTP_PORT / SPATE_CH_HTTPS_TCP_PORT / SPATE_CH_HTTPS_INTERSERVER_PORT"
    done
    local bin
    bin=$(ch_server_bin)
    [[ -n $bin ]] || die "clickhouse-server not installed (scripts/services.sh up installs it)"
    mkdir -p "$DIR/log" "$DIR/tmp" "$DIR/user_files" "$DIR/format_schemas"
    write_config
    (cd "$DIR" && exec setsid "$bin" --config-file="$DIR/etc/config.xml" -- \
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
    echo $! >"$PID"
}

https_ok() { ch_answers_tls "https://$HOST:$HTTPS_PORT" "$CERTS/ca.crt" "$CERTS/client.crt" "$CERTS/client.key"; }
stunnel_ok() { ch_answers_tls "https://$HOST:$STUNNEL_PORT" "$CERTS/ca.crt"; }


stunnel_spawn() {
    if [[ -n $(pid_of "$STUNNEL_PID" "$STUNNEL_CONF") ]]; then
        log "stunnel: reusing pid $(<"$STUNNEL_PID")"
        return 0
    fi
    local bin
    bin=$(stunnel_bin)
    [[ -n $bin ]] || die "stunnel4 is needed for the one-way HTTPS endpoint: apt-get install -y stunnel4"
    port_in_use "$HOST" "$STUNNEL_PORT" && die "port $HOST:$STUNNEL_PORT is taken; set SPATE_CH_HTTPS_STUNNEL_PORT"
    cat >"$STUNNEL_CONF" <<EOF
; written by scripts/clickhouse-https.sh: HTTPS, no client certificate asked
foreground = yes
pid =
output = $DIR/log/stunnel.log
[clickhouse-https]
accept = $HOST:$STUNNEL_PORT
connect = $HOST:$HTTP_PORT
cert = $CERTS/server.crt
key = $CERTS/server.key
verify = 0
EOF
    (exec setsid "$bin" "$STUNNEL_CONF" </dev/null >>"$DIR/log/stunnel.log" 2>&1) &
    echo $! >"$STUNNEL_PID"
}

cmd_up() {
    need_python
    mkdir -p "$SVC" "$DIR/log"
    tls_make_certs "$CERTS"
    ch_https_spawn
    wait_until "ClickHouse HTTPS" "$PID" "$MATCH" "$DIR/log/stdout.log" "$DIR/log/err.log" -- https_ok
    log "ClickHouse HTTPS: pid $(<"$PID") on https://$HOST:$HTTPS_PORT (client certificate required), http://$HOST:$HTTP_PORT"
    stunnel_spawn
    wait_until "stunnel (ClickHouse)" "$STUNNEL_PID" "$STUNNEL_CONF" "$DIR/log/stunnel.log" -- stunnel_ok
    log "stunnel: pid $(<"$STUNNEL_PID") on https://$HOST:$STUNNEL_PORT (server certificate only)"
}

cmd_down() {
    stop_pid "$STUNNEL_PID" "$STUNNEL_CONF" "stunnel (ClickHouse)" &
    stop_pid "$PID" "$MATCH" "ClickHouse HTTPS" &
    wait
}

cmd_status() {
    local ok=0 pid
    pid=$(pid_of "$PID" "$MATCH")
    if [[ -n $pid ]] && https_ok; then
        printf '%-15sup       pid %s  https://%s:%s  http://%s:%s\n' clickhouse-tls "$pid" "$HOST" "$HTTPS_PORT" "$HOST" "$HTTP_PORT"
    else
        printf '%-15s%s\n' clickhouse-tls "$([[ -n $pid ]] && echo "no-reply pid $pid" || echo down)"
        ok=1
    fi
    pid=$(pid_of "$STUNNEL_PID" "$STUNNEL_CONF")
    if [[ -n $pid ]] && stunnel_ok; then
        printf '%-15sup       pid %s  https://%s:%s\n' stunnel-ch "$pid" "$HOST" "$STUNNEL_PORT"
    else
        printf '%-15s%s\n' stunnel-ch "$([[ -n $pid ]] && echo "no-reply pid $pid" || echo down)"
        ok=1
    fi
    return $ok
}

cmd_env() {
    cat <<EOF
# ClickHouse 18.16 over HTTPS (scripts/clickhouse-https.sh): client certificates
# required on HTTPS_URL; TLS_URL (stunnel) asks for none; PLAIN_URL is the same
# server as HTTPS_URL over HTTP
export SPATE_TEST_CLICKHOUSE_HTTPS_URL=https://$HOST:$HTTPS_PORT
export SPATE_TEST_CLICKHOUSE_HTTPS_PLAIN_URL=http://$HOST:$HTTP_PORT
export SPATE_TEST_CLICKHOUSE_TLS_URL=https://$HOST:$STUNNEL_PORT
export SPATE_TEST_CLICKHOUSE_HTTPS_CA=$CERTS/ca.crt
export SPATE_TEST_CLICKHOUSE_HTTPS_OTHER_CA=$CERTS/other-ca.crt
export SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_CERT=$CERTS/client.crt
export SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_KEY=$CERTS/client.key
export SPATE_TEST_CLICKHOUSE_HTTPS_USER=$USER_NAME
export SPATE_TEST_CLICKHOUSE_HTTPS_PASSWORD_FILE=$CERTS/password
# the server's users.d: a test adds a user there and changes its password
# (the server reads the files again within seconds)
export SPATE_TEST_CLICKHOUSE_HTTPS_USERS_D=$DIR/etc/users.d
export SPATE_CH_HTTPS_PORT=$HTTPS_PORT
export SPATE_CH_HTTPS_HTTP_PORT=$HTTP_PORT
export SPATE_CH_HTTPS_TCP_PORT=$TCP_PORT
export SPATE_CH_HTTPS_INTERSERVER_PORT=$INTERSERVER_PORT
export SPATE_CH_HTTPS_STUNNEL_PORT=$STUNNEL_PORT
EOF
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
