#!/usr/bin/env python3
"""Insert modes side by side, in one run (issue 33).

The same BENCH_MODES_MESSAGES (default 2M) small events of `spate gen`, 8
partitions, loaded by `spate run --until-end` into a fresh MergeTree of
ClickHouse 26.9 (the suite's server with asynchronous inserts) three ways,
alternated BENCH_MODES_REPEAT rounds (default 2), medians reported:

- streamed: the default, one INSERT request per shard streamed for up to
  --insert-request (500 ms), one part per request;
- per-batch: `--insert-request 0`, one request (one part) per batch;
- async: `--async-insert`, one request per batch with `async_insert=1,
  wait_for_async_insert=1`: the server buffers and writes the inserts
  together (what users ask peers for: clickhouse-kafka-connect#378).

Per run: rows over the run's wall time (start-up and the group join
included, the same for all), spate's own CPU per million rows (getrusage
of the child), the server's CPU per million rows (its process, from
/proc/PID/stat) during the load and until the merges the load set off
have ended (parts cost the server twice: written, then merged), the parts
the load created (level 0 in system.parts) and spate's peak RSS.

Reads build/services.env's variables (eval "$(scripts/services.sh env)").
Ends with one line:
  bench: insert_modes streamed_rows_per_s=<int> per_batch_rows_per_s=<int> async_rows_per_s=<int>
         streamed_server_cpu_ratio=<float> async_server_cpu_ratio=<float>
         (ratios to per-batch's server CPU per row, merges included)
"""
import os
import resource
import statistics
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATE = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
BROKERS = os.environ["SPATE_TEST_BROKERS"]
CH = os.environ["SPATE_TEST_CLICKHOUSE_MODERN_URL"]
PID_FILE = os.environ.get("SPATE_TEST_CLICKHOUSE_MODERN_PID_FILE")
MESSAGES = int(os.environ.get("BENCH_MODES_MESSAGES", "2000000"))
REPEAT = int(os.environ.get("BENCH_MODES_REPEAT", "2"))
TIMEOUT = 120 + 60 * MESSAGES / 1e6
COLUMNS = ("ts DateTime, user_id UInt64, event LowCardinality(String), country LowCardinality(String), "
           "value Float64, duration_ms UInt32, ok UInt8, tags Array(String), session String, page String")
MODES = {
    "streamed": [],
    "per-batch": ["--insert-request", "0"],
    "async": ["--async-insert"],
}


def ch(sql):
    with urllib.request.urlopen(CH, data=sql.encode(), timeout=120) as r:
        return r.read().decode().strip()


def server_cpu_s():
    if not PID_FILE or not os.path.exists(PID_FILE):
        return None
    pid = open(PID_FILE).read().strip()
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(topic, mode, n):
    name = f"{mode.replace('-', '_')}_{n}_{os.getpid()}"
    ch("CREATE DATABASE IF NOT EXISTS spate_bench_modes")
    table = f"spate_bench_modes.{name}"
    ch(f"CREATE TABLE {table} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (ts, user_id)")
    group = f"bench_modes_{name}_{time.time_ns()}"
    s0 = server_cpu_s()
    t0 = time.monotonic()
    proc = subprocess.Popen([SPATE, "run", "--brokers", BROKERS, "--topic", topic, "--group", group,
                             "--clickhouse-url", CH, "--table", table, "--until-end",
                             "-X", "session.timeout.ms=6000", *MODES[mode]], stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    s1 = server_cpu_s()
    assert os.waitstatus_to_exitcode(status) == 0, f"{mode}: spate exited {status}"
    # The merges the load set off, to their end (at most a minute).
    quiet, end = 0, time.monotonic() + 60
    while quiet < 3 and time.monotonic() < end:
        merging = int(ch(f"SELECT count() FROM system.merges WHERE database = 'spate_bench_modes' "
                         f"AND table = '{name}'"))
        quiet = quiet + 1 if merging == 0 else 0
        time.sleep(0.5)
    s2 = server_cpu_s()
    rows = int(ch(f"SELECT count() FROM {table}"))
    distinct = int(ch(f"SELECT uniqExact(session) FROM {table}"))
    assert distinct == MESSAGES, f"{mode}: {distinct} of {MESSAGES} messages arrived"
    parts = int(ch(f"SELECT countIf(level = 0) FROM system.parts WHERE database = 'spate_bench_modes' "
                   f"AND table = '{name}'"))
    ch(f"DROP TABLE {table}")
    r = {
        "rows_per_s": rows / wall,
        "cpu": (usage.ru_utime + usage.ru_stime) / (rows / 1e6),
        "server": (s1 - s0) / (rows / 1e6) if s0 is not None else None,
        "merged": (s2 - s0) / (rows / 1e6) if s0 is not None else None,
        "parts": parts,
        "rss": usage.ru_maxrss / 1024,
    }
    print(f"{mode:9} round {n}: {r['rows_per_s']:,.0f} rows/s ({wall:.1f} s), spate {r['cpu']:.2f} CPU s/M, "
          f"server {r['server'] if r['server'] is None else round(r['server'], 2)} CPU s/M "
          f"({r['merged'] if r['merged'] is None else round(r['merged'], 2)} with the merges), "
          f"{parts} parts, {r['rss']:.0f} MiB", flush=True)
    return r


def main():
    topic = f"bench_modes_{os.getpid()}_{time.time_ns()}"
    subprocess.run([SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(MESSAGES),
                    "--partitions", "8", "--schema", "small"],
                   check=True, stderr=subprocess.DEVNULL, timeout=TIMEOUT)
    got = {m: [] for m in MODES}
    for n in range(REPEAT):
        for mode in MODES:
            got[mode].append(load(topic, mode, n))

    def med(mode, key):
        vals = [r[key] for r in got[mode] if r[key] is not None]
        return statistics.median(vals) if vals else None

    def ratio(a, b):
        return f"{a / b:.3f}" if a is not None and b else "none"

    print("\n| mode | rows/s | spate CPU s/M | server CPU s/M, load | with its merges | parts | peak RSS MiB |"
          "\n|---|---|---|---|---|---|---|")
    for mode in MODES:
        server, merged = med(mode, "server"), med(mode, "merged")
        print(f"| {mode} | {med(mode, 'rows_per_s'):,.0f} | {med(mode, 'cpu'):.2f} | "
              f"{'—' if server is None else f'{server:.2f}'} | {'—' if merged is None else f'{merged:.2f}'} | "
              f"{med(mode, 'parts'):.0f} | {med(mode, 'rss'):.0f} |")
    base = med("per-batch", "merged")
    print(f"bench: insert_modes streamed_rows_per_s={med('streamed', 'rows_per_s'):.0f} "
          f"per_batch_rows_per_s={med('per-batch', 'rows_per_s'):.0f} "
          f"async_rows_per_s={med('async', 'rows_per_s'):.0f} "
          f"streamed_server_cpu_ratio={ratio(med('streamed', 'merged'), base)} "
          f"async_server_cpu_ratio={ratio(med('async', 'merged'), base)}")


if __name__ == "__main__":
    main()
