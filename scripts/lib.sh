# scripts/lib.sh: helpers shared by scripts/services.sh and scripts/kafka-engine.sh.
# Sourced, never run. Before sourcing, a script sets:
#   LOG_TAG   prefix of its log lines ("services", "kafka-engine")
#   TIMEOUT   seconds wait_until waits for a service to answer
#
#   log / die                  messages on stderr (die exits 1)
#   need_python                python3 or a clear error (the probes use it)
#   ch_answers URL             ClickHouse answers `SELECT 1` over HTTP
#   kafka_answers HOST PORT [CA]  a Kafka broker answers ApiVersions v0 (TLS with CA)
#   port_in_use HOST PORT      something accepts connections there
#   pid_alive PID              alive and not a zombie
#   pid_of FILE MATCH          the PID in FILE if alive and its command line
#                              contains MATCH (guards against PID reuse)
#   stop_pid FILE MATCH LABEL  SIGCONT+SIGTERM, SIGKILL after 30 s, remove FILE
#   kill_pid FILE MATCH LABEL  SIGKILL (a crash), wait until gone, remove FILE
#   wait_until LABEL FILE MATCH LOG... -- CMD...   poll CMD until it succeeds
#   show_logs FILE...          tails of the logs that exist
#   as_root CMD...             run as root (directly or through sudo)
#   ch_server_bin              path of clickhouse-server, or nothing
#
# Only processes named in our PID files are ever signalled.

log() { printf '[%s] %s\n' "${LOG_TAG:-spate}" "$*" >&2; }
die() { printf '[%s] error: %s\n' "${LOG_TAG:-spate}" "$*" >&2; exit 1; }

need_python() {
    command -v python3 >/dev/null 2>&1 || die "python3 is required (apt-get install -y python3)"
}

# ---------------------------------------------------------------- probes ----
# All probes are python3 standard library only: no curl, no Kafka client needed.

# ClickHouse: `SELECT 1` over HTTP must answer "1".
ch_answers() {
    python3 - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/?query=SELECT%201", timeout=2) as r:
    sys.exit(0 if r.read().strip() == b"1" else 1)
EOF
}

# Kafka: send ApiVersions v0 and check the reply parses with error_code 0.
# kafka_answers HOST PORT [CAFILE]: with CAFILE, over TLS, verifying the
# broker's certificate (and its name HOST) against CAFILE.
kafka_answers() {
    python3 - "$1" "$2" "${3:-}" <<'EOF' >/dev/null 2>&1
import socket, ssl, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
if sys.argv[3]:
    s = ssl.create_default_context(cafile=sys.argv[3]).wrap_socket(s, server_hostname=sys.argv[1])
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
pid_alive() {
    [[ $1 =~ ^[0-9]+$ ]] && kill -0 "$1" 2>/dev/null &&
        [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# pid_of FILE MATCH: print the PID in FILE if that process is alive (not a
# zombie: exited, not yet reaped) and its command line contains MATCH; else
# print nothing.
pid_of() {
    local file=$1 match=$2 pid
    [[ -s $file ]] || return 0
    pid=$(<"$file")
    pid_alive "$pid" || return 0
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q -- "$match" || return 0
    echo "$pid"
}

# wait_gone FILE MATCH TENTHS: wait up to TENTHS/10 s for pid_of to be empty.
wait_gone() {
    local i
    for ((i = 0; i < $3; i++)); do
        [[ -n $(pid_of "$1" "$2") ]] || return 0
        sleep 0.1
    done
    return 1
}

# stop_pid FILE MATCH LABEL: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
    local file=$1 match=$2 label=$3 pid
    pid=$(pid_of "$file" "$match")
    if [[ -z $pid ]]; then
        rm -f "$file"
        log "$label: not running"
        return 0
    fi
    kill -CONT "$pid" 2>/dev/null || true   # in case a test left it SIGSTOPped
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$file" "$match" 300; then
        log "$label: pid $pid did not exit within 30 s, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$file" "$match" 50 || true
    fi
    rm -f "$file"
    log "$label: stopped (pid $pid)"
}

# kill_pid FILE MATCH LABEL: SIGKILL (a crash: no shutdown at all), wait until
# the process is gone, remove FILE. Fails if it is not running.
kill_pid() {
    local file=$1 match=$2 label=$3 pid
    pid=$(pid_of "$file" "$match")
    [[ -n $pid ]] || die "$label is not running"
    kill -KILL "$pid"
    wait_gone "$file" "$match" 100 || die "$label: pid $pid still there 10 s after SIGKILL"
    rm -f "$file"
    log "$label pid $pid: SIGKILL"
}

# wait_until LABEL PIDFILE MATCH LOGFILE... -- CMD...: poll CMD until it
# succeeds, the process dies, or TIMEOUT passes; on failure show the log tails
# and exit 1.
wait_until() {
    local label=$1 file=$2 match=$3; shift 3
    local logs=()
    while [[ $1 != -- ]]; do logs+=("$1"); shift; done
    shift
    local deadline=$((SECONDS + ${TIMEOUT:-60}))
    while ((SECONDS < deadline)); do
        # liveness only: right after `cmd &` the child may not have exec'd yet,
        # so its command line can still be bash's
        if ! pid_alive "$(cat "$file" 2>/dev/null)"; then
            show_logs "${logs[@]}"
            die "$label exited during start-up (logs above)"
        fi
        if "$@"; then
            # answered: make sure it was our process and not a squatter on the port
            [[ -n $(pid_of "$file" "$match") ]] || { show_logs "${logs[@]}"; die "$label exited during start-up"; }
            return 0
        fi
        sleep 0.2
    done
    show_logs "${logs[@]}"
    die "$label did not answer within ${TIMEOUT:-60}s (logs above; raise the timeout?)"
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

# stunnel_bin: the path of stunnel (Debian's stunnel4), installed with
# apt-get when missing (the HTTPS ClickHouse without client certificates
# and the mutual-TLS broker sit behind it).
stunnel_bin() {
    local bin
    bin=$(command -v stunnel4 2>/dev/null || command -v stunnel 2>/dev/null || true)
    if [[ -z $bin ]]; then
        log "installing stunnel4 from Debian (apt-get)" >&2
        { as_root apt-get update -q && as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends stunnel4; } >&2 || true
        bin=$(command -v stunnel4 2>/dev/null || command -v stunnel 2>/dev/null || true)
    fi
    printf '%s' "$bin"
}

ch_server_bin() {
    command -v clickhouse-server 2>/dev/null || { [[ -x /usr/sbin/clickhouse-server ]] && echo /usr/sbin/clickhouse-server; } || true
}

# ------------------------------------------------------------------ TLS ----
# tls_make_certs DIR: a test CA and, signed by it, a server certificate for
# 127.0.0.1/localhost and a client certificate (CN spate-client, clientAuth),
# plus an unrelated CA (other-ca.crt) for wrong-CA tests, made with openssl
# once and reused while valid for another day:
#   DIR/ca.{crt,key} DIR/server.{crt,key} DIR/client.{crt,key} DIR/other-ca.crt
tls_make_certs() {
    local dir=$1 f
    local ok=1
    for f in ca.crt server.crt server.key client.crt client.key other-ca.crt; do
        [[ -s $dir/$f ]] || ok=0
    done
    ((ok)) && openssl x509 -checkend 86400 -noout -in "$dir/server.crt" >/dev/null 2>&1 &&
        openssl x509 -checkend 86400 -noout -in "$dir/client.crt" >/dev/null 2>&1 && return 0
    command -v openssl >/dev/null 2>&1 || die "openssl is needed for the TLS test servers: apt-get install -y openssl"
    rm -rf "$dir"
    mkdir -p "$dir"
    local o=$dir/openssl.log
    {
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=spate test CA" \
            -keyout "$dir/ca.key" -out "$dir/ca.crt" &&
            openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=spate unrelated CA" \
                -keyout "$dir/other-ca.key" -out "$dir/other-ca.crt" &&
            openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
                -keyout "$dir/server.key" -out "$dir/server.csr" &&
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext" &&
            openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
                -CAcreateserial -days 3650 -extfile "$dir/server.ext" -out "$dir/server.crt" &&
            openssl req -newkey rsa:2048 -nodes -subj "/CN=spate-client" \
                -keyout "$dir/client.key" -out "$dir/client.csr" &&
            printf 'extendedKeyUsage=clientAuth\n' >"$dir/client.ext" &&
            openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
                -CAcreateserial -days 3650 -extfile "$dir/client.ext" -out "$dir/client.crt"
    } >"$o" 2>&1 || { cat "$o" >&2; die "openssl could not make the test certificates in $dir"; }
    chmod 600 "$dir"/*.key
    log "TLS: CA $dir/ca.crt, server certificate for 127.0.0.1/localhost, client certificate"
}

# ch_answers_tls URL CA [CERT KEY]: ClickHouse answers `SELECT 1` over HTTPS,
# its certificate verified against CA, presenting CERT/KEY when given.
ch_answers_tls() {
    python3 - "$@" <<'PY' >/dev/null 2>&1
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
if len(sys.argv) > 4:
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
with urllib.request.urlopen(sys.argv[1] + "/?query=SELECT%201", timeout=2, context=ctx) as r:
    sys.exit(0 if r.read().strip() == b"1" else 1)
PY
}
