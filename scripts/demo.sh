#!/usr/bin/env bash
# scripts/demo.sh: end-to-end demo against the local services (scripts/services.sh).
#
#   1. services up, `cargo build --release`
#   2. fresh Kafka topic `demo` (DEMO_PARTITIONS partitions) and a fresh table
#      spate_demo.events in ClickHouse
#   3. `spate gen` writes DEMO_COUNT JSON events to the topic
#   4. `spate run --until-end` loads them into ClickHouse; timed -> rows/s
#   5. sample queries: row count, distinct (partition, offset), per-partition ranges
#
# Environment: DEMO_COUNT (1000000), DEMO_PARTITIONS (4), DEMO_TOPIC (demo),
#   DEMO_GROUP (spate-demo), DEMO_SKIP_BUILD=1 to use the existing binary,
#   DEMO_FORMAT (json; avro or protobuf: the events in the Confluent wire format, through
#   SCHEMA_REGISTRY_URL, or a scripts/schema_registry.py started on
#   DEMO_REGISTRY_PORT, default 8081, for the demo's duration),
#   SPATE_BIN (default \$CARGO_TARGET_DIR or target/, then release/spate),
#   plus everything scripts/services.sh reads (ports, SPATE_BUILD_DIR).
# Exit status: non-zero if any step fails or fewer distinct offsets than
# DEMO_COUNT arrived in ClickHouse.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${SPATE_BUILD_DIR:-$ROOT/build}"

DEMO_COUNT="${DEMO_COUNT:-1000000}"
DEMO_PARTITIONS="${DEMO_PARTITIONS:-4}"
DEMO_TOPIC="${DEMO_TOPIC:-demo}"
DEMO_GROUP="${DEMO_GROUP:-spate-demo}"
TABLE=spate_demo.events
SPATE="${SPATE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/spate}"

say() { printf '\n== %s\n' "$*"; }

scripts/services.sh up
# shellcheck source=/dev/null
source "$BUILD/services.env"

# chq SQL [k=v settings...]: run SQL over ClickHouse HTTP, print the answer.
chq() {
    python3 - "$SPATE_TEST_CLICKHOUSE_URL" "$@" <<'EOF'
import sys, urllib.parse, urllib.request, urllib.error
url, sql, settings = sys.argv[1], sys.argv[2], sys.argv[3:]
q = urllib.parse.urlencode([tuple(s.split("=", 1)) for s in settings])
try:
    with urllib.request.urlopen(url + "/?" + q, data=sql.encode(), timeout=120) as r:
        sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    sys.exit(f"ClickHouse error {e.code}: {e.read().decode().strip()}\n  in: {sql}")
EOF
}

if [[ ${DEMO_SKIP_BUILD:-0} != 1 ]]; then
    say "cargo build --release"
    cargo build --release
fi
[[ -x $SPATE ]] || { echo "missing $SPATE" >&2; exit 1; }

say "fresh topic $DEMO_TOPIC ($DEMO_PARTITIONS partitions) on $SPATE_TEST_BROKERS"
# Deleting the topic also drops the group's committed offsets for it (nisshi),
# so every demo run starts from offset 0.
KAFKA_CLI="$SPATE_TEST_KAFKA_BIN"
"$KAFKA_CLI" topic delete --broker "tcp://$SPATE_TEST_BROKERS" "$DEMO_TOPIC" >/dev/null 2>&1 || true
"$KAFKA_CLI" topic create --broker "tcp://$SPATE_TEST_BROKERS" --partitions "$DEMO_PARTITIONS" "$DEMO_TOPIC"

say "fresh table $TABLE on $SPATE_TEST_CLICKHOUSE_URL"
chq "CREATE DATABASE IF NOT EXISTS spate_demo"
chq "DROP TABLE IF EXISTS $TABLE"
# Valid on ClickHouse 18.16 (LowCardinality is experimental there) and on current
# releases (the setting is accepted and ignored).
chq "CREATE TABLE $TABLE (
    ts          DateTime,
    user_id     UInt64,
    event       LowCardinality(String),
    value       Float64,
    tags        Array(String),
    _topic      String,
    _partition  UInt32,
    _offset     UInt64,
    _timestamp  DateTime
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (ts)" allow_experimental_low_cardinality_type=1

# --format avro|protobuf: a schema registry for gen (registers) and run (fetches).
FORMAT_ARGS=()
if [[ ${DEMO_FORMAT:-json} != json ]]; then
    if [[ -z ${SCHEMA_REGISTRY_URL:-} ]]; then
        SCHEMA_REGISTRY_URL="http://127.0.0.1:${DEMO_REGISTRY_PORT:-8081}"
        python3 scripts/schema_registry.py --port "${DEMO_REGISTRY_PORT:-8081}" &
        REGISTRY_PID=$!
        trap 'kill "$REGISTRY_PID" 2>/dev/null || true' EXIT
        for _ in $(seq 50); do
            python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/subjects/x/versions/1')" "$SCHEMA_REGISTRY_URL" 2>&1 | grep -q 404 && break
            sleep 0.1
        done
    fi
    FORMAT_ARGS=(--format "$DEMO_FORMAT" --schema-registry "$SCHEMA_REGISTRY_URL")
fi

say "spate gen: $DEMO_COUNT ${DEMO_FORMAT:-json} events"
t0=$(date +%s.%N)
"$SPATE" gen --brokers "$SPATE_TEST_BROKERS" --topic "$DEMO_TOPIC" --count "$DEMO_COUNT" "${FORMAT_ARGS[@]}"
t1=$(date +%s.%N)

say "spate run --until-end"
"$SPATE" run \
    --brokers "$SPATE_TEST_BROKERS" \
    --topic "$DEMO_TOPIC" \
    --group "$DEMO_GROUP" \
    --clickhouse-url "$SPATE_TEST_CLICKHOUSE_URL" \
    --table "$TABLE" \
    --until-end \
    "${FORMAT_ARGS[@]}" \
    -X session.timeout.ms=6000
t2=$(date +%s.%N)

say "results"
rows=$(chq "SELECT count() FROM $TABLE")
distinct=$(chq "SELECT uniqExact(_partition, _offset) FROM $TABLE")
python3 - "$DEMO_COUNT" "$rows" "$distinct" "$t0" "$t1" "$t2" <<'EOF'
import sys
want, rows, distinct = (int(x) for x in sys.argv[1:4])
t0, t1, t2 = (float(x) for x in sys.argv[4:7])
print(f"gen: {want} events in {t1 - t0:.2f} s ({want / max(t1 - t0, 1e-9):,.0f} events/s)")
print(f"run: {rows} rows in {t2 - t1:.2f} s ({rows / max(t2 - t1, 1e-9):,.0f} rows/s, "
      "includes start-up and the group join)")
print(f"rows {rows}, distinct (partition, offset) {distinct}, duplicates {rows - distinct}")
EOF
echo
chq "SELECT _partition, count() AS rows, min(_offset), max(_offset)
     FROM $TABLE GROUP BY _partition ORDER BY _partition FORMAT PrettyCompactNoEscapes"
chq "SELECT event, count() AS n, round(avg(value), 3) AS avg_value
     FROM $TABLE GROUP BY event ORDER BY n DESC LIMIT 10 FORMAT PrettyCompactNoEscapes"

if ((distinct < DEMO_COUNT)); then
    echo "demo FAILED: $distinct distinct offsets in ClickHouse, expected $DEMO_COUNT" >&2
    exit 1
fi
echo "demo OK"
