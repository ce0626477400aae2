#!/usr/bin/env bash
# deploy/secure/make-certs.sh [DIR]: the certificates, keystore and secrets of the
# docker-compose profile `secure` (Kafka on SASL_SSL, ClickHouse on HTTPS), made
# with openssl into DIR (default deploy/secure/certs, which git ignores):
#
#   ca.crt, ca.key                 a private CA (what spate verifies both servers with)
#   kafka.crt, kafka.key           the broker's certificate: kafka-secure, localhost, 127.0.0.1
#   kafka.keystore.p12             the same as a PKCS12 keystore, as apache/kafka wants it,
#   keystore_creds, key_creds      ... and its password, in the files the image reads
#   kafka_server_jaas.conf         SASL/PLAIN users of the broker: admin and spate
#   client.properties              Kafka's own tools over SASL_SSL (the topic set-up)
#   clickhouse.crt, clickhouse.key ClickHouse's certificate: clickhouse-secure, localhost, 127.0.0.1
#   clickhouse-users.xml           the ClickHouse user `spate` (SHA-256 of its password)
#   secrets.env                    the passwords, for the spate containers (env_file)
#
# Passwords are random, made once: run it again to renew the certificates, with
# --new-passwords to renew those too. Every file is readable by the containers'
# users (kafka runs as uid 1000, clickhouse as 101, spate as 10001): a demo set-up,
# keep DIR private on a shared host.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/certs"
NEW_PASSWORDS=""
for a in "$@"; do
    case $a in
        --new-passwords) NEW_PASSWORDS=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) DIR=$a ;;
    esac
done
command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh: openssl is needed" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
DAYS=825

# secret NAME: a random password kept in NAME.secret (made once).
secret() {
    if [[ -n $NEW_PASSWORDS || ! -s $1.secret ]]; then
        openssl rand -hex 16 >"$1.secret"
    fi
    cat "$1.secret"
}

KEYSTORE_PASSWORD=$(secret keystore)
KAFKA_ADMIN_PASSWORD=$(secret kafka-admin)
KAFKA_PASSWORD=$(secret kafka-spate)
CLICKHOUSE_PASSWORD=$(secret clickhouse-spate)

openssl req -x509 -newkey rsa:2048 -nodes -days "$DAYS" -subj "/CN=spate compose CA" \
    -keyout ca.key -out ca.crt 2>/dev/null

# server NAME HOST: a key and a certificate for HOST, localhost and 127.0.0.1.
server() {
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' "$2" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
    openssl verify -CAfile ca.crt "$1.crt" >/dev/null
}
server kafka kafka-secure
server clickhouse clickhouse-secure

openssl pkcs12 -export -in kafka.crt -inkey kafka.key -certfile ca.crt -name kafka \
    -passout "pass:$KEYSTORE_PASSWORD" -out kafka.keystore.p12
printf '%s' "$KEYSTORE_PASSWORD" >keystore_creds
printf '%s' "$KEYSTORE_PASSWORD" >key_creds

cat >kafka_server_jaas.conf <<JAAS
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin"
    password="$KAFKA_ADMIN_PASSWORD"
    user_admin="$KAFKA_ADMIN_PASSWORD"
    user_spate="$KAFKA_PASSWORD";
};
JAAS

cat >client.properties <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/secrets/ca.crt
PROPS

CLICKHOUSE_SHA256=$(printf '%s' "$CLICKHOUSE_PASSWORD" | openssl dgst -sha256 -r | cut -d' ' -f1)
cat >clickhouse-users.xml <<XML
<clickhouse>
    <users>
        <spate>
            <password_sha256_hex>$CLICKHOUSE_SHA256</password_sha256_hex>
            <networks><ip>::/0</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
            <access_management>0</access_management>
        </spate>
    </users>
</clickhouse>
XML

# The passwords spate reads: the Kafka one as a librdkafka property
# (SPATE_PROPERTY, merged over the config file's [kafka] table), the
# ClickHouse one as SPATE_PASSWORD.
cat >secrets.env <<ENV
SPATE_PROPERTY=sasl.password=$KAFKA_PASSWORD
SPATE_PASSWORD=$CLICKHOUSE_PASSWORD
KAFKA_PASSWORD=$KAFKA_PASSWORD
ENV

chmod 0644 ./*
echo "make-certs.sh: CA, Kafka keystore, ClickHouse certificate and secrets in $DIR"
