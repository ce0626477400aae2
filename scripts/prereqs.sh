#!/usr/bin/env bash
# scripts/prereqs.sh: install the OS packages spate's build, services and tests
# need on Debian/Ubuntu (apt-get; sudo when not root), only those missing.
# Called by .ci/run and by the Makefile's targets that build (build, lint,
# test, bench, demo) so that a newcomer's first `make demo` builds the same
# binary CI does: librdkafka's ./configure decides once, at its first build,
# whether to include libcurl (below), and cargo keeps that decision.
# SPATE_SKIP_PREREQS=1 skips it (a machine managed otherwise).
set -euo pipefail
[[ ${SPATE_SKIP_PREREQS:-0} == 1 ]] && exit 0
command -v apt-get >/dev/null 2>&1 || { echo "[prereqs] no apt-get: install the packages listed in scripts/prereqs.sh yourself" >&2; exit 0; }

# gcc/make: rdkafka-sys builds the bundled librdkafka with its own ./configure
#   (bash) and make; cc crate builds for other -sys crates, and for the nisshi
#   broker's (sqlite, aws-lc, zstd, lz4) when services.sh builds it.
# perl with IPC::Cmd (Debian's perl, not perl-base alone): OpenSSL's Configure,
#   run by openssl-src for rdkafka's "ssl-vendored" feature. zlib (libz-static),
#   zstd and libcurl (curl-static) are built from the crates' own sources, so
#   no -dev package is needed for them and nothing but glibc links dynamically.
# libcurl4-openssl-dev: build time only. librdkafka's ./configure enables
#   libcurl (OAUTHBEARER's sasl.oauthbearer.method=oidc) only if a link check
#   with -lcurl passes, and rdkafka-sys 4.10 does not pass it the static
#   libcurl's directory (rust-rdkafka issue 804), so the check needs a system
#   libcurl to succeed; the binary itself links curl-sys's static libcurl.
# pkg-config: optional for librdkafka's configure; kept for the -sys crates'
#   build scripts when a user turns a vendored feature off.
# python3 + pip: scripts/services.sh probes the services with python3 and
#   installs the ClickHouse 26.9 wheel (chdb-core) with pip into a venv;
#   librdkafka's Makefile also calls python3 for its version string.
# openssl: services.sh makes the TLS test brokers' and ClickHouse's CA and
#   certificates.
# stunnel4: the one-way HTTPS endpoint in front of the test ClickHouse
#   (scripts/clickhouse-https.sh), and the mutual-TLS terminator (verify = 2)
#   in front of a test broker, since nisshi cannot require client certificates.
# util-linux: flock, so two clones never build the nisshi broker at once.
# ca-certificates: HTTPS to the package registries (crates.io for nisshi).
# python3-yaml: deploy/kubernetes/test/check.py and deploy/compose_check.py
#   read YAML (tests/deploy.rs).
# systemd: systemd-analyze, which tests/deploy.rs runs on the systemd unit.
# prometheus: promtool, which tests/deploy.rs runs on the alerts (check and
#   unit tests); the package's server is not started.
# kubectl (1.21 or later, for kustomize 4+) renders the Kubernetes manifests
#   in tests/deploy.rs; Debian's kubernetes-client is 1.20, too old, so it is
#   not installed here: the test fails naming it when kubectl is missing.
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
perl -MIPC::Cmd -e 1 >/dev/null 2>&1 || need+=(perl)
dpkg -s libcurl4-openssl-dev >/dev/null 2>&1 || need+=(libcurl4-openssl-dev)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v stunnel4 >/dev/null 2>&1 || command -v stunnel >/dev/null 2>&1 || need+=(stunnel4)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
[[ -d /etc/ssl/certs ]] && ls /etc/ssl/certs/*.pem >/dev/null 2>&1 || need+=(ca-certificates)
# ZooKeeper for the 18.16 server's ReplicatedMergeTree (exactly-once tests)
[[ -s /usr/share/java/zookeeper.jar ]] || need+=(zookeeper)
python3 -c 'import yaml' >/dev/null 2>&1 || need+=(python3-yaml)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v kubectl >/dev/null 2>&1 || echo "[prereqs] kubectl not found: tests/deploy.rs needs kubectl 1.21+ (not in Debian's packages)" >&2
if ((${#need[@]})); then
    echo "[prereqs] installing ${need[*]}"
    sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi
