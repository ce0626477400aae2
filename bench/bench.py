#!/usr/bin/env python3
"""spate end-to-end benchmarks against the local services (make services).

Preloads BENCH_MESSAGES demo events (spate gen, 8 partitions) into a fresh
topic once, then loads them with `spate run --until-end` under several
configurations, each into a fresh MergeTree table with a fresh group, and
measures for each run:

- steady-state rows/s: from ClickHouse's count() sampled every 50 ms, the
  rate between 10% and 90% of the rows (start-up and the group join, which
  tansu delays by session.timeout.ms/2, are excluded);
- CPU seconds per million rows of the spate process (user+sys, getrusage);
- peak RSS of the spate process (ru_maxrss).

Suites (BENCH_SUITE, comma-separated, default "backpressure"):

- backpressure: the default memory budget (backpressure machinery on, and
  tripping when ClickHouse is the bottleneck) against a budget too large to
  ever trigger it; reports the throughput ratio (issue: within 5%).

Results go to bench/results/<suite>-<date>.md; the last line printed is a
summary in a fixed form for tools to track.
"""

import datetime
import json
import os
import statistics
import tempfile
import subprocess
import sys
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATE = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
BROKERS = os.environ["SPATE_TEST_BROKERS"]
CH = os.environ["SPATE_TEST_CLICKHOUSE_URL"]
MESSAGES = int(os.environ.get("BENCH_MESSAGES", "2000000"))
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "8"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "2"))
RUN_TIMEOUT = 600


def ch(sql, **settings):
    q = urllib.parse.urlencode(settings)
    with urllib.request.urlopen(f"{CH}/?{q}", data=sql.encode(), timeout=60) as r:
        return r.read().decode().strip()


def fresh_table(name):
    ch("CREATE DATABASE IF NOT EXISTS spate_bench")
    ch(f"DROP TABLE IF EXISTS spate_bench.{name}")
    ch(
        f"CREATE TABLE spate_bench.{name} (ts DateTime, user_id UInt64, event LowCardinality(String), "
        "value Float64, tags Array(String), _partition UInt32, _offset UInt64) "
        "ENGINE = MergeTree() ORDER BY (_partition, _offset)",
        allow_experimental_low_cardinality_type=1,
    )
    return f"spate_bench.{name}"


def preload(topic):
    t0 = time.monotonic()
    subprocess.run(
        [SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(MESSAGES),
         "--partitions", str(PARTITIONS)],
        check=True, stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - t0


def load(topic, label, extra):
    table = fresh_table(label.replace("-", "_"))
    group = f"bench_{label}_{int(time.time() * 1000)}"
    args = [SPATE, "run", "--brokers", BROKERS, "--topic", topic, "--group", group,
            "--clickhouse-url", CH, "--table", table, "--until-end",
            "-X", "session.timeout.ms=6000", "--log-level", "warn"] + extra
    log = tempfile.TemporaryFile(mode="w+")
    started = time.monotonic()
    proc = subprocess.Popen(args, stderr=log)
    samples = []
    while True:
        # wait4 gives this child's own rusage (CPU and peak RSS).
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid != 0:
            break
        if time.monotonic() - started > RUN_TIMEOUT:
            proc.kill()
            sys.exit(f"bench: {label} did not finish within {RUN_TIMEOUT}s")
        try:
            samples.append((time.monotonic(), int(ch(f"SELECT count() FROM {table}"))))
        except Exception:
            pass
        time.sleep(0.05)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        log.seek(0)
        sys.exit(f"bench: {label} exited {code}:\n{log.read()[-2000:]}")
    rows = int(ch(f"SELECT count() FROM {table}"))
    samples.append((time.monotonic(), rows))
    if int(ch(f"SELECT uniqExact(_partition, _offset) FROM {table}")) != MESSAGES:
        sys.exit(f"bench: {label}: not every message arrived")
    lo = next(s for s in samples if s[1] >= 0.1 * MESSAGES)
    hi = next(s for s in samples if s[1] >= 0.9 * MESSAGES)
    steady = (hi[1] - lo[1]) / max(hi[0] - lo[0], 1e-9)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "label": label,
        "rows": rows,
        "wall_s": time.monotonic() - started,
        "rows_per_s": steady,
        "cpu_s_per_million": cpu / (rows / 1e6),
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "args": " ".join(extra),
    }


def table_md(results):
    out = ["| run | steady rows/s | wall s | CPU s / M rows | peak RSS MiB | flags |",
           "|---|---:|---:|---:|---:|---|"]
    for r in results:
        out.append(f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['wall_s']:.1f} | "
                   f"{r['cpu_s_per_million']:.2f} | {r['peak_rss_mib']:.0f} | `{r['args']}` |")
    return "\n".join(out)


def suite_backpressure(topic):
    configs = [
        ("budget-default", ["--max-buffered-bytes", "256MiB"]),
        ("budget-huge", ["--max-buffered-bytes", "16GiB"]),
    ]
    results = []
    # Alternate the two configurations so drift on a shared machine hits both.
    for i in range(REPEAT):
        for label, extra in configs:
            r = load(topic, f"{label}-{i}", extra)
            print(f"  {r['label']}: {r['rows_per_s']:,.0f} rows/s steady, {r['cpu_s_per_million']:.2f} CPU s/M",
                  flush=True)
            results.append(r)
    def median(label, key):
        return statistics.median(r[key] for r in results if r["label"].startswith(label))
    rate = {label: median(label, "rows_per_s") for label, _ in configs}
    cpu = {label: median(label, "cpu_s_per_million") for label, _ in configs}
    ratio = rate["budget-default"] / rate["budget-huge"]
    cpu_ratio = cpu["budget-default"] / cpu["budget-huge"]
    summary = (f"bench backpressure: ratio={ratio:.3f} cpu_ratio={cpu_ratio:.3f} "
               f"default_rows_per_s={rate['budget-default']:.0f} huge_rows_per_s={rate['budget-huge']:.0f}")
    return results, summary, ratio


def main():
    suites = os.environ.get("BENCH_SUITE", "backpressure").split(",")
    topic = f"bench_{int(time.time())}"
    print(f"bench: preloading {MESSAGES} events into {topic} ({PARTITIONS} partitions)", flush=True)
    secs = preload(topic)
    print(f"bench: preloaded in {secs:.1f}s", flush=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    server = ch("SELECT version()")
    for suite in suites:
        results, summary, _ = {"backpressure": suite_backpressure}[suite](topic)
        md = (f"# spate bench: {suite}\n\n{date}, {os.cpu_count()} cores, ClickHouse {server}, "
              f"{MESSAGES} events on {PARTITIONS} partitions, {REPEAT} runs per configuration "
              f"(alternated; ratios of each configuration's median steady rows/s and median CPU s per million rows).\n\n{table_md(results)}\n\n`{summary}`\n")
        path = os.path.join(ROOT, "bench", "results", f"{suite}-{date}.md")
        with open(path, "w") as f:
            f.write(md)
        print(table_md(results))
        print(f"bench: wrote {os.path.relpath(path, ROOT)}")
        print(summary)


if __name__ == "__main__":
    main()
