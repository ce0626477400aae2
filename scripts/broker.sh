# scripts/broker.sh: the Kafka part of scripts/services.sh (sourced by it, never
# run): builds or finds the nisshi broker and runs the test brokers on it.
#
# nisshi (crates.io, a Kafka wire-protocol broker) is pinned to NISSHI_VERSION
# and built once per machine with `cargo install` into
#   ${SPATE_CACHE_DIR:-/var/cache/spate}/nisshi-<version>/bin/nisshi
# outside the clone, so a fresh clone on the same machine finds it; a new pin
# builds a new directory. It needs rustc >= NISSHI_RUSTC_MIN: the default
# toolchain if it is new enough, else `+nightly`, else an error.
#
# Brokers (one process each; storage sqlite under build/services/nisshi/, so
# messages, committed offsets and users survive a restart or a kill -9, except
# the suite's broker, which keeps them in memory):
#   plain      PLAINTEXT        SPATE_KAFKA_PORT (9092)            the suite's broker (memory)
#   durable    PLAINTEXT        SPATE_KAFKA_DURABLE_PORT (9096)    the one kafka-kill/-start take away
#   tls        SSL              SPATE_KAFKA_TLS_PORT (9093)        no client auth
#   scram      SASL_PLAINTEXT   SPATE_KAFKA_SCRAM_PORT (9094)      SCRAM-SHA-256/512
#   scram_tls  SASL_SSL         SPATE_KAFKA_SCRAM_TLS_PORT (9095)  SCRAM over TLS
#   mtls       PLAINTEXT        SPATE_KAFKA_MTLS_BACKEND_PORT (9098), behind stunnel
# Mutual TLS: nisshi cannot require client certificates, so stunnel4 (Debian's
# package) listens on SPATE_KAFKA_MTLS_PORT (9097) with the server certificate,
# requires a client certificate signed by the CA (`verify = 2`, CAfile) and
# forwards to the mtls broker, which advertises the terminator's address, so
# clients keep coming back through it. The client certificate is
# build/services/tls/client.{crt,key} (CN "spate-client").
# The TLS ones serve build/services/tls/server.{crt,key}, signed by the CA
# build/services/tls/ca.crt (made with openssl at the first start), for
# 127.0.0.1 and localhost. The SCRAM ones know the user SCRAM_USER with
# SCRAM_PASSWORD under both mechanisms (created through the broker itself,
# started once without --authentication on the same file).
#
# Why the suite's broker is in memory: on sqlite, nisshi reads its pages with
# a syscall each (24 GB read for a 540 MB file in one suite run, a core of
# system time) and the suite's big loads took 3-5x longer; the backpressure
# and frozen-shard tests then measure the broker, not spate. Durability is
# tested where it matters, on the durable broker (the broker restart test).
# SPATE_KAFKA_STORAGE=sqlite puts the suite's broker on sqlite too;
# SPATE_KAFKA_DURABLE_STORAGE=memory makes the durable one forget (to see the
# broker restart test fail).
#
# Expects from services.sh: SVC, KAFKA_HOST, KAFKA_PORT and lib.sh.

NISSHI_VERSION=0.8.1
NISSHI_RUSTC_MIN=1.96.0
CACHE_DIR="${SPATE_CACHE_DIR:-/var/cache/spate}"
NISSHI_ROOT="$CACHE_DIR/nisshi-$NISSHI_VERSION"
NISSHI_BIN="$NISSHI_ROOT/bin/nisshi"
NISSHI_DIR="$SVC/nisshi"
TLS_DIR="$SVC/tls"

KAFKA_TLS_PORT="${SPATE_KAFKA_TLS_PORT:-9093}"
KAFKA_SCRAM_PORT="${SPATE_KAFKA_SCRAM_PORT:-9094}"
KAFKA_SCRAM_TLS_PORT="${SPATE_KAFKA_SCRAM_TLS_PORT:-9095}"
KAFKA_DURABLE_PORT="${SPATE_KAFKA_DURABLE_PORT:-9096}"
KAFKA_MTLS_PORT="${SPATE_KAFKA_MTLS_PORT:-9097}"
KAFKA_MTLS_BACKEND_PORT="${SPATE_KAFKA_MTLS_BACKEND_PORT:-9098}"
SCRAM_USER=spate
SCRAM_PASSWORD=spate-secret

KAFKA_BROKERS=(plain durable tls scram scram_tls mtls)
declare -A KB_PORT=([plain]=$KAFKA_PORT [durable]=$KAFKA_DURABLE_PORT [tls]=$KAFKA_TLS_PORT [scram]=$KAFKA_SCRAM_PORT [scram_tls]=$KAFKA_SCRAM_TLS_PORT [mtls]=$KAFKA_MTLS_BACKEND_PORT)
declare -A KB_TLS=([plain]="" [durable]="" [tls]=1 [scram]="" [scram_tls]=1 [mtls]="")
declare -A KB_AUTH=([plain]="" [durable]="" [tls]="" [scram]=1 [scram_tls]=1 [mtls]="")
# What a broker advertises when clients reach it through something else.
declare -A KB_ADVERTISE=([mtls]="tcp://$KAFKA_HOST:$KAFKA_MTLS_PORT")
KAFKA_PID="$SVC/nisshi-plain.pid"
KAFKA_DURABLE_PID="$SVC/nisshi-durable.pid"

# ------------------------------------------------------------- install ----
# version_ge A B: version A >= B (suffixes like -nightly ignored).
version_ge() {
    [[ $(printf '%s\n%s\n' "${1%%-*}" "${2%%-*}" | sort -V | head -n1) == "${2%%-*}" ]]
}

# nisshi_toolchain: print the cargo toolchain argument that builds nisshi: ""
# (the default) or "+nightly"; fails if neither is new enough.
nisshi_toolchain() {
    local v
    v=$(rustc --version 2>/dev/null | awk '{print $2}')
    if [[ -n $v ]] && version_ge "$v" "$NISSHI_RUSTC_MIN"; then
        echo ""
        return 0
    fi
    v=$(rustc +nightly --version 2>/dev/null | awk '{print $2}')
    if [[ -n $v ]] && version_ge "$v" "$NISSHI_RUSTC_MIN"; then
        echo "+nightly"
        return 0
    fi
    return 1
}

install_nisshi() {
    if [[ -x $NISSHI_BIN ]] && "$NISSHI_BIN" --version 2>/dev/null | grep -q -- "$NISSHI_VERSION"; then
        return 0
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: it builds the nisshi broker"
    command -v cc >/dev/null 2>&1 || die "a C compiler is needed to build nisshi: apt-get install -y build-essential"
    local tc
    tc=$(nisshi_toolchain) ||
        die "nisshi $NISSHI_VERSION needs rustc >= $NISSHI_RUSTC_MIN; found $(rustc --version 2>/dev/null || echo none)" \
            "and no new enough nightly (rustup toolchain install nightly)"
    mkdir -p "$CACHE_DIR" 2>/dev/null || as_root mkdir -p "$CACHE_DIR"
    [[ -w $CACHE_DIR ]] || die "$CACHE_DIR is not writable: set SPATE_CACHE_DIR"
    # One build per machine even when two clones run `up` at once.
    exec 8>"$CACHE_DIR/nisshi.lock"
    flock 8
    if [[ -x $NISSHI_BIN ]] && "$NISSHI_BIN" --version 2>/dev/null | grep -q -- "$NISSHI_VERSION"; then
        exec 8>&-
        return 0
    fi
    local t0=$SECONDS logf="$CACHE_DIR/nisshi-$NISSHI_VERSION-build.log"
    log "building nisshi $NISSHI_VERSION with cargo ${tc:-(default toolchain)} $(rustc ${tc} --version)" \
        "into $NISSHI_ROOT (once per machine; ~16-30 min on 2 cores; log $logf)"
    # libsql: the sqlite storage engine; dynostore: what the default features
    # need that --no-default-features drops. No Postgres, no lakes, no OTel.
    if ! cargo ${tc} install nisshi --version "$NISSHI_VERSION" --locked \
        --no-default-features --features libsql,dynostore \
        --root "$NISSHI_ROOT" --target-dir "$CACHE_DIR/nisshi-build" >"$logf" 2>&1; then
        tail -n 30 "$logf" >&2
        die "cargo install nisshi $NISSHI_VERSION failed (log: $logf)"
    fi
    exec 8>&-
    log "built $("$NISSHI_BIN" --version) in $((SECONDS - t0)) s"
}

# tls_files: the test CA, the server certificate for 127.0.0.1/localhost
# and the client certificate the mutual-TLS terminator accepts, made once
# (scripts/lib.sh's tls_make_certs, shared with the HTTPS ClickHouse).
tls_files() { tls_make_certs "$TLS_DIR"; }

# ---------------------------------------------------------------- start ----
kb_url() { echo "tcp://$KAFKA_HOST:${KB_PORT[$1]}"; }
kb_pid() { echo "$SVC/nisshi-$1.pid"; }
kb_match() { echo "--listener-url $(kb_url "$1")"; }

# kb_probe NAME: the broker answers ApiVersions (over TLS for the TLS ones).
kb_probe() {
    kafka_answers "$KAFKA_HOST" "${KB_PORT[$1]}" ${KB_TLS[$1]:+"$TLS_DIR/ca.crt"}
}

# kafka_scram_ok HOST PORT CA MECHANISM USER PASSWORD: a SCRAM login
# (SaslHandshake v1, SaslAuthenticate v0, RFC 5802 with the server's signature
# checked) succeeds; over TLS when CA is not empty. Standard library only.
kafka_scram_ok() {
    python3 - "$@" <<'EOF' >/dev/null 2>&1
import base64, hashlib, hmac, os, socket, ssl, struct, sys
host, port, ca, mech, user, password = sys.argv[1:7]
h = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mech]
s = socket.create_connection((host, int(port)), timeout=5)
if ca:
    s = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname=host)
s.settimeout(5)
def rd(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed")
        b += c
    return b
def call(api, ver, corr, body):
    cid = b"spate-services"
    req = struct.pack(">hhih", api, ver, corr, len(cid)) + cid + body
    s.sendall(struct.pack(">i", len(req)) + req)
    (n,) = struct.unpack(">i", rd(4))
    resp = rd(n)
    assert struct.unpack(">i", resp[:4])[0] == corr
    return resp[4:]
def authenticate(corr, data):
    r = call(36, 0, corr, struct.pack(">i", len(data)) + data)
    (err, mlen) = struct.unpack(">hh", r[:4])
    if err != 0:
        sys.exit(2)
    off = 4 + max(mlen, 0)
    (blen,) = struct.unpack(">i", r[off:off + 4])
    return r[off + 4:off + 4 + blen].decode()
m = mech.encode()
r = call(17, 1, 1, struct.pack(">h", len(m)) + m)
if struct.unpack(">h", r[:2])[0] != 0:
    sys.exit(3)
nonce = base64.b64encode(os.urandom(18)).decode()
bare = f"n={user},r={nonce}"
first = authenticate(2, ("n,," + bare).encode())
f = dict(kv.split("=", 1) for kv in first.split(","))
assert f["r"].startswith(nonce)
salted = hashlib.pbkdf2_hmac(h().name, password.encode(), base64.b64decode(f["s"]), int(f["i"]))
client_key = hmac.new(salted, b"Client Key", h).digest()
without_proof = f"c=biws,r={f['r']}"
auth_msg = f"{bare},{first},{without_proof}".encode()
sig = hmac.new(h(client_key).digest(), auth_msg, h).digest()
proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
final = authenticate(3, f"{without_proof},p={proof}".encode())
server_sig = hmac.new(hmac.new(salted, b"Server Key", h).digest(), auth_msg, h).digest()
sys.exit(0 if final == "v=" + base64.b64encode(server_sig).decode() else 4)
EOF
}

# kb_logins NAME: for a SCRAM broker, both mechanisms log in with the test user
# and a wrong password is refused; fails (with a message) otherwise.
kb_logins() {
    local name=$1 ca="" m
    [[ -n ${KB_TLS[$name]} ]] && ca="$TLS_DIR/ca.crt"
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do
        kafka_scram_ok "$KAFKA_HOST" "${KB_PORT[$name]}" "$ca" "$m" "$SCRAM_USER" "$SCRAM_PASSWORD" ||
            { log "nisshi $name: $m login as $SCRAM_USER failed"; return 1; }
        ! kafka_scram_ok "$KAFKA_HOST" "${KB_PORT[$name]}" "$ca" "$m" "$SCRAM_USER" "not-$SCRAM_PASSWORD" ||
            { log "nisshi $name: $m accepted a wrong password"; return 1; }
    done
}

# kb_spawn NAME [setup]: start broker NAME in the background; `setup` starts it
# plaintext without --authentication on the same storage (to create its users:
# the user CLI speaks plaintext).
kb_spawn() {
    local name=$1 url args=()
    url=$(kb_url "$name")
    port_in_use "$KAFKA_HOST" "${KB_PORT[$name]}" &&
        die "port ${KB_PORT[$name]} is taken by a process this script did not start; stop it or set" \
            "SPATE_KAFKA_PORT / SPATE_KAFKA_DURABLE_PORT / SPATE_KAFKA_TLS_PORT / SPATE_KAFKA_SCRAM_PORT / SPATE_KAFKA_SCRAM_TLS_PORT /" \
            "SPATE_KAFKA_MTLS_BACKEND_PORT"
    if [[ ${2:-} != setup ]]; then
        [[ -n ${KB_TLS[$name]} ]] && args+=(--cert "$TLS_DIR/server.crt" --key "$TLS_DIR/server.key")
        [[ -n ${KB_AUTH[$name]} ]] && args+=(--authentication)
    fi
    local storage="sqlite://$name.db"
    # memory: nothing survives a restart (see the header)
    [[ $name == plain && ${SPATE_KAFKA_STORAGE:-memory} == memory ]] && storage=memory://nisshi/
    [[ $name == durable && ${SPATE_KAFKA_DURABLE_STORAGE:-sqlite} == memory ]] && storage=memory://nisshi/
    mkdir -p "$NISSHI_DIR"
    # setsid: own session, so Ctrl-C in the terminal that ran `make test` doesn't reach it.
    # --group-initial-rebalance-delay 0s: a fresh group is assigned at once
    # (Kafka's default waits 3 s for more members).
    (cd "$NISSHI_DIR" && exec setsid "$NISSHI_BIN" broker \
        --cluster-id spate-test \
        --listener-url "$url" \
        --advertised-listener-url "${KB_ADVERTISE[$name]:-$url}" \
        --storage-engine "$storage" \
        --group-initial-rebalance-delay 0s \
        "${args[@]}" \
        </dev/null >>"$NISSHI_DIR/$name.log" 2>&1) &
    echo $! >"$(kb_pid "$name")"
}

kb_wait() {
    wait_until "nisshi $1 (Kafka)" "$(kb_pid "$1")" "$(kb_match "$1")" "$NISSHI_DIR/$1.log" -- kb_probe "$1"
}

# kb_users NAME: create the SCRAM user under both mechanisms, once per storage
# file: start without --authentication, create, stop (SIGTERM).
kb_users() {
    local name=$1 mark="$NISSHI_DIR/$1.users" m
    [[ -s $NISSHI_DIR/$name.db && -s $mark ]] && return 0
    kb_spawn "$name" setup
    wait_until "nisshi $name (user set-up)" "$(kb_pid "$name")" "$(kb_match "$name")" "$NISSHI_DIR/$name.log" -- \
        kafka_answers "$KAFKA_HOST" "${KB_PORT[$name]}"
    for m in scram256 scram512; do
        "$NISSHI_BIN" user create --broker "tcp://$KAFKA_HOST:${KB_PORT[$name]}" \
            --mechanism "$m" "$SCRAM_USER" "$SCRAM_PASSWORD" >>"$NISSHI_DIR/$name.log" 2>&1 ||
            { show_logs "$NISSHI_DIR/$name.log"; die "nisshi user create $SCRAM_USER ($m) on $name failed"; }
    done
    stop_pid "$(kb_pid "$name")" "$(kb_match "$name")" "nisshi $name (user set-up)"
    echo "$SCRAM_USER scram256 scram512" >"$mark"
}

# kb_start NAME: start broker NAME (or reuse a running one) and wait for it.
kb_start() {
    local name=$1 pidf
    pidf=$(kb_pid "$name")
    if [[ -n $(pid_of "$pidf" "$(kb_match "$name")") ]]; then
        kb_wait "$name"
        log "Kafka $name: reusing nisshi pid $(<"$pidf") on $KAFKA_HOST:${KB_PORT[$name]}"
        return 0
    fi
    rm -f "$pidf"
    [[ -n ${KB_TLS[$name]} ]] && tls_files
    [[ -n ${KB_AUTH[$name]} ]] && kb_users "$name"
    kb_spawn "$name"
    kb_wait "$name"
    if [[ -n ${KB_AUTH[$name]} ]] && ! kb_logins "$name"; then
        show_logs "$NISSHI_DIR/$name.log"
        die "nisshi $name: SCRAM logins do not work (remove $NISSHI_DIR/$name.users to create the user again)"
    fi
    log "Kafka $name: nisshi pid $(<"$pidf") on $KAFKA_HOST:${KB_PORT[$name]}${KB_AUTH[$name]:+ (SCRAM logins checked)}"
}

kafka_up() {
    install_nisshi
    local n
    for n in "${KAFKA_BROKERS[@]}"; do kb_start "$n"; done
    mtls_start
}

kafka_down() {
    local n
    for n in "${KAFKA_BROKERS[@]}"; do
        stop_pid "$(kb_pid "$n")" "$(kb_match "$n")" "Kafka $n (nisshi)" &
    done
    mtls_stop &
    wait
}

# kafka_kill: SIGKILL the durable broker (a crash; kafka-start restarts it on the
# same storage).
kafka_kill() {
    kill_pid "$KAFKA_DURABLE_PID" "$(kb_match durable)" "Kafka durable (nisshi)"
}

kafka_status() {
    local ok=0 n pid label
    for n in "${KAFKA_BROKERS[@]}"; do
        [[ $n == plain ]] && label=kafka || label="kafka-${n//_/-}"
        pid=$(pid_of "$(kb_pid "$n")" "$(kb_match "$n")")
        if [[ -n $pid ]] && kb_probe "$n"; then
            printf '%-16sup       pid %s  %s\n' "$label" "$pid" "$KAFKA_HOST:${KB_PORT[$n]}"
        elif [[ -n $pid ]]; then
            printf '%-16sno-reply pid %s  %s\n' "$label" "$pid" "$KAFKA_HOST:${KB_PORT[$n]}"; ok=1
        else
            printf '%-16sdown\n' "$label"; ok=1
        fi
    done
    mtls_status || ok=1
    return $ok
}

# kafka_env: the lines of build/services.env about the brokers.
kafka_env() {
    cat <<EOF
export SPATE_TEST_BROKERS=$KAFKA_HOST:$KAFKA_PORT
export SPATE_TEST_KAFKA_PID_FILE=$KAFKA_PID
export SPATE_TEST_KAFKA_BIN=$NISSHI_BIN
# the durable (sqlite) broker that services.sh kafka-kill/kafka-stop/kafka-start take away
export SPATE_TEST_KAFKA_DURABLE_BROKERS=$KAFKA_HOST:$KAFKA_DURABLE_PORT
export SPATE_TEST_KAFKA_DURABLE_PID_FILE=$KAFKA_DURABLE_PID
# security: SSL, SASL_PLAINTEXT and SASL_SSL brokers; the CA that signed their certificate
export SPATE_TEST_KAFKA_TLS_BROKERS=$KAFKA_HOST:$KAFKA_TLS_PORT
export SPATE_TEST_KAFKA_SCRAM_BROKERS=$KAFKA_HOST:$KAFKA_SCRAM_PORT
export SPATE_TEST_KAFKA_SCRAM_TLS_BROKERS=$KAFKA_HOST:$KAFKA_SCRAM_TLS_PORT
export SPATE_TEST_KAFKA_CA=$TLS_DIR/ca.crt
export SPATE_TEST_KAFKA_SCRAM_USER=$SCRAM_USER
export SPATE_TEST_KAFKA_SCRAM_PASSWORD=$SCRAM_PASSWORD
export SPATE_TEST_KAFKA_SCRAM_MECHANISMS=SCRAM-SHA-256,SCRAM-SHA-512
# mutual TLS: stunnel (verify = 2) in front of a plain broker; the client certificate it accepts
export SPATE_TEST_KAFKA_MTLS_BROKERS=$KAFKA_HOST:$KAFKA_MTLS_PORT
export SPATE_TEST_KAFKA_MTLS_CA=$TLS_DIR/ca.crt
export SPATE_TEST_KAFKA_MTLS_CLIENT_CERT=$TLS_DIR/client.crt
export SPATE_TEST_KAFKA_MTLS_CLIENT_KEY=$TLS_DIR/client.key
EOF
}

# kafka_port_env: what services.sh reads, for services.env.
kafka_port_env() {
    cat <<EOF
export SPATE_KAFKA_PORT=$KAFKA_PORT
export SPATE_KAFKA_TLS_PORT=$KAFKA_TLS_PORT
export SPATE_KAFKA_SCRAM_PORT=$KAFKA_SCRAM_PORT
export SPATE_KAFKA_SCRAM_TLS_PORT=$KAFKA_SCRAM_TLS_PORT
export SPATE_KAFKA_DURABLE_PORT=$KAFKA_DURABLE_PORT
export SPATE_KAFKA_MTLS_PORT=$KAFKA_MTLS_PORT
export SPATE_KAFKA_MTLS_BACKEND_PORT=$KAFKA_MTLS_BACKEND_PORT
export SPATE_CACHE_DIR=$CACHE_DIR
EOF
}

# ---------------------------------------------------- mutual TLS (stunnel) ----
MTLS_CONF="$SVC/stunnel-mtls.conf"
MTLS_PID="$SVC/stunnel-mtls.pid"
MTLS_LOG="$SVC/stunnel-mtls.log"

# mtls_answers: ApiVersions through the terminator with the client certificate.
mtls_answers() {
    python3 - "$KAFKA_HOST" "$KAFKA_MTLS_PORT" "$TLS_DIR" <<'EOF' >/dev/null 2>&1
import socket, ssl, struct, sys
host, port, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context(cafile=d + "/ca.crt")
ctx.load_cert_chain(d + "/client.crt", d + "/client.key")
s = ctx.wrap_socket(socket.create_connection((host, port), timeout=2), server_hostname=host)
s.settimeout(2)
cid = b"spate-services"
body = struct.pack(">hhih", 18, 0, 4242, len(cid)) + cid
s.sendall(struct.pack(">i", len(body)) + body)
n = struct.unpack(">i", s.recv(4))[0]
sys.exit(0 if n > 4 else 1)
EOF
}

mtls_start() {
    local bin
    bin=$(stunnel_bin)
    [[ -n $bin ]] || die "stunnel4 is needed for the mutual-TLS test broker: apt-get install -y stunnel4"
    if [[ -n $(pid_of "$MTLS_PID" "$MTLS_CONF") ]]; then
        wait_until "stunnel (Kafka mutual TLS)" "$MTLS_PID" "$MTLS_CONF" "$MTLS_LOG" -- mtls_answers
        log "Kafka mtls: reusing stunnel pid $(<"$MTLS_PID") on $KAFKA_HOST:$KAFKA_MTLS_PORT"
        return 0
    fi
    port_in_use "$KAFKA_HOST" "$KAFKA_MTLS_PORT" &&
        die "port $KAFKA_MTLS_PORT is taken by a process this script did not start; stop it or set SPATE_KAFKA_MTLS_PORT"
    tls_files
    cat >"$MTLS_CONF" <<EOF
; written by scripts/broker.sh: mutual TLS in front of nisshi mtls
foreground = yes
pid =
output = $MTLS_LOG
debug = notice
[kafka-mtls]
accept = $KAFKA_HOST:$KAFKA_MTLS_PORT
connect = $KAFKA_HOST:$KAFKA_MTLS_BACKEND_PORT
cert = $TLS_DIR/server.crt
key = $TLS_DIR/server.key
CAfile = $TLS_DIR/ca.crt
verify = 2
EOF
    (exec setsid "$bin" "$MTLS_CONF" </dev/null >>"$MTLS_LOG" 2>&1) &
    echo $! >"$MTLS_PID"
    wait_until "stunnel (Kafka mutual TLS)" "$MTLS_PID" "$MTLS_CONF" "$MTLS_LOG" -- mtls_answers
    log "Kafka mtls: stunnel pid $(<"$MTLS_PID") on $KAFKA_HOST:$KAFKA_MTLS_PORT (verify = 2) -> nisshi mtls on $KAFKA_MTLS_BACKEND_PORT"
}

mtls_stop() {
    stop_pid "$MTLS_PID" "$MTLS_CONF" "stunnel (Kafka mutual TLS)"
}

mtls_status() {
    local pid
    pid=$(pid_of "$MTLS_PID" "$MTLS_CONF")
    if [[ -n $pid ]] && mtls_answers; then
        printf '%-16sup       pid %s  %s (stunnel, client certificate required)\n' kafka-mtls-tls "$pid" "$KAFKA_HOST:$KAFKA_MTLS_PORT"
    elif [[ -n $pid ]]; then
        printf '%-16sno-reply pid %s  %s\n' kafka-mtls-tls "$pid" "$KAFKA_HOST:$KAFKA_MTLS_PORT"
        return 1
    else
        printf '%-16sdown\n' kafka-mtls-tls
        return 1
    fi
}
