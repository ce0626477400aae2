#!/usr/bin/env python3
"""Change data capture beside plain JSON, measured in one run.

The same BENCH_CDC_MESSAGES (default 1M) small events of `spate gen` are
produced twice, 4 partitions each: as plain JSON rows, and as Debezium
change events (`spate gen --envelope debezium`: a create per event, the
JSON envelope, ~2.3x the bytes). Each topic is loaded by
`spate run --until-end` into a fresh table of ClickHouse 26.9: the rows
into a MergeTree, the changes (`--envelope debezium`) into a
`ReplacingMergeTree(ver, is_deleted)` ordered by `_source_lsn` (unique per
event, so merges keep every row and the count can be checked). The runs
alternate, BENCH_CDC_REPEAT rounds (default 2), JSON first; medians
reported. rows/s is rows over the run's wall time (group join and start-up
included, the same for both); CPU per row is spate's own user + system
time (getrusage of the child) over the rows.

Reads build/services.env's variables (eval "$(scripts/services.sh env)").
Ends with one line:
  bench: cdc_rows_per_s=<int> json_rows_per_s=<int> cdc_rate_ratio=<float>
         cdc_cpu_us_per_row=<float> json_cpu_us_per_row=<float> cdc_cpu_ratio=<float>
"""
import os
import resource
import statistics
import subprocess
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATE = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
BROKERS = os.environ["SPATE_TEST_BROKERS"]
CH = os.environ["SPATE_TEST_CLICKHOUSE_MODERN_URL"]
MESSAGES = int(os.environ.get("BENCH_CDC_MESSAGES", "1000000"))
REPEAT = int(os.environ.get("BENCH_CDC_REPEAT", "2"))
TIMEOUT = 120 + 90 * MESSAGES / 1e6
COLUMNS = ("ts DateTime, user_id UInt64, event LowCardinality(String), country LowCardinality(String), "
           "value Float64, duration_ms UInt32, ok UInt8, tags Array(String), session String, page String")


def ch(sql):
    with urllib.request.urlopen(CH, data=sql.encode(), timeout=120) as r:
        return r.read().decode().strip()


def fresh_table(name, cdc):
    ch("CREATE DATABASE IF NOT EXISTS spate_bench_cdc")
    ch(f"DROP TABLE IF EXISTS spate_bench_cdc.{name}")
    if cdc:
        ch(f"CREATE TABLE spate_bench_cdc.{name} ({COLUMNS}, ver UInt64, is_deleted UInt8, "
           "_source_lsn UInt64) ENGINE = ReplacingMergeTree(ver, is_deleted) ORDER BY _source_lsn")
    else:
        ch(f"CREATE TABLE spate_bench_cdc.{name} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (ts, user_id)")
    return f"spate_bench_cdc.{name}"


def load(topic, label, n):
    cdc = label == "cdc"
    table = fresh_table(f"{label}_{n}", cdc)
    group = f"bench_cdc_{label}_{n}_{os.getpid()}_{time.time_ns()}"
    extra = ["--envelope", "debezium"] if cdc else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([SPATE, "run", "--brokers", BROKERS, "--topic", topic, "--group", group,
                    "--clickhouse-url", CH, "--table", table, "--until-end", *extra],
                   check=True, stderr=subprocess.DEVNULL, timeout=TIMEOUT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    count = "uniqExact(_source_lsn)" if cdc else "count()"
    rows = int(ch(f"SELECT {count} FROM {table}"))
    assert rows == MESSAGES, f"{label}: {rows} rows, expected {MESSAGES}"
    ch(f"DROP TABLE {table}")
    us = cpu / rows * 1e6
    print(f"{label:4} round {n}: {rows / wall:,.0f} rows/s ({wall:.1f} s), "
          f"spate CPU {us:.2f} us/row", flush=True)
    return rows / wall, us


def produce(topic, envelope):
    subprocess.run([SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(MESSAGES),
                    "--partitions", "4", "--schema", "small", "--envelope", envelope],
                   check=True, stderr=subprocess.DEVNULL, timeout=TIMEOUT)


def main():
    stamp = f"{os.getpid()}_{time.time_ns()}"
    topics = {"json": f"bench_cdc_rows_{stamp}", "cdc": f"bench_cdc_changes_{stamp}"}
    produce(topics["json"], "none")
    produce(topics["cdc"], "debezium")
    got = {"json": [], "cdc": []}
    for n in range(REPEAT):
        for label in ("json", "cdc"):
            got[label].append(load(topics[label], label, n))
    rate = {k: statistics.median(r for r, _ in v) for k, v in got.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in got.items()}
    print(f"bench: cdc_rows_per_s={rate['cdc']:.0f} json_rows_per_s={rate['json']:.0f} "
          f"cdc_rate_ratio={rate['cdc'] / rate['json']:.3f} "
          f"cdc_cpu_us_per_row={cpu['cdc']:.2f} json_cpu_us_per_row={cpu['json']:.2f} "
          f"cdc_cpu_ratio={cpu['cdc'] / cpu['json']:.3f}")


if __name__ == "__main__":
    main()
