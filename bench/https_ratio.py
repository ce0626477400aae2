#!/usr/bin/env python3
"""HTTPS inserts as a ratio to plain HTTP, measured in one run.

One topic of `spate gen` small events (BENCH_HTTPS_MESSAGES, default 1M, 4
partitions) is loaded by `spate run --until-end` into two fresh tables of
the same ClickHouse 18.16 server (scripts/clickhouse-https.sh): once over
its plain HTTP port, once over its HTTPS port with mutual TLS (rustls,
the test CA, a client certificate). The runs alternate, BENCH_HTTPS_REPEAT
rounds (default 2), plain first; rows/s is rows over the run's wall time
(group join and start-up included, the same for both), medians reported.

Reads build/services.env's variables (eval "$(scripts/services.sh env)").
Ends with one line:
  bench: https_rows_per_s=<int> http_rows_per_s=<int> https_ratio=<float>
"""
import os
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATE = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
BROKERS = os.environ["SPATE_TEST_BROKERS"]
PLAIN = os.environ["SPATE_TEST_CLICKHOUSE_HTTPS_PLAIN_URL"]
HTTPS = os.environ["SPATE_TEST_CLICKHOUSE_HTTPS_URL"]
TLS_ARGS = [
    "--clickhouse-ca", os.environ["SPATE_TEST_CLICKHOUSE_HTTPS_CA"],
    "--clickhouse-cert", os.environ["SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_CERT"],
    "--clickhouse-key", os.environ["SPATE_TEST_CLICKHOUSE_HTTPS_CLIENT_KEY"],
]
MESSAGES = int(os.environ.get("BENCH_HTTPS_MESSAGES", "1000000"))
REPEAT = int(os.environ.get("BENCH_HTTPS_REPEAT", "2"))
TIMEOUT = 120 + 60 * MESSAGES / 1e6
COLUMNS = ("ts DateTime, user_id UInt64, event LowCardinality(String), country LowCardinality(String), "
           "value Float64, duration_ms UInt32, ok UInt8, tags Array(String), session String, page String")


def ch(sql, **settings):
    q = urllib.parse.urlencode(settings)
    with urllib.request.urlopen(f"{PLAIN}/?{q}", data=sql.encode(), timeout=120) as r:
        return r.read().decode().strip()


def fresh_table(name):
    ch("CREATE DATABASE IF NOT EXISTS spate_bench_https")
    ch(f"DROP TABLE IF EXISTS spate_bench_https.{name}")
    ch(f"CREATE TABLE spate_bench_https.{name} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (ts, user_id)",
       allow_experimental_low_cardinality_type=1)
    return f"spate_bench_https.{name}"


def load(topic, label, url, extra, n):
    table = fresh_table(f"{label}_{n}")
    group = f"bench_https_{label}_{n}_{os.getpid()}_{time.time_ns()}"
    t0 = time.monotonic()
    subprocess.run([SPATE, "run", "--brokers", BROKERS, "--topic", topic, "--group", group,
                    "--clickhouse-url", url, "--table", table, "--until-end", *extra],
                   check=True, stderr=subprocess.DEVNULL, timeout=TIMEOUT)
    wall = time.monotonic() - t0
    rows = int(ch(f"SELECT count() FROM {table}"))
    assert rows == MESSAGES, f"{label}: {rows} rows, expected {MESSAGES}"
    ch(f"DROP TABLE {table}")
    print(f"{label:5} round {n}: {rows / wall:,.0f} rows/s ({wall:.1f} s)", flush=True)
    return rows / wall


def main():
    topic = f"bench_https_{os.getpid()}_{time.time_ns()}"
    subprocess.run([SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(MESSAGES),
                    "--partitions", "4", "--schema", "small"],
                   check=True, stderr=subprocess.DEVNULL, timeout=TIMEOUT)
    http, https = [], []
    for n in range(REPEAT):
        http.append(load(topic, "http", PLAIN, [], n))
        https.append(load(topic, "https", HTTPS, TLS_ARGS, n))
    h, s = statistics.median(http), statistics.median(https)
    print(f"bench: https_rows_per_s={s:.0f} http_rows_per_s={h:.0f} https_ratio={s / h:.3f}")


if __name__ == "__main__":
    main()
