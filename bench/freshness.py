#!/usr/bin/env python3
"""Freshness: how old a row is when ClickHouse acknowledges it (issue 33).

Two runs of `spate run` with default flags into a fresh MergeTree table of
ClickHouse 26.9 whose rows record the server's clock at insert
(`ins DateTime64(3) MATERIALIZED now64(3)`) beside the message's Kafka
timestamp (`_timestamp DateTime64(3)`):

- steady: `spate gen --rate BENCH_FRESH_RATE` (default 20,000 small events/s)
  for BENCH_FRESH_SECONDS (default 20 s), spate reading as they come;
- saturation: `spate gen` as fast as it can (BENCH_FRESH_BURST events,
  default 2M) while spate reads: the rate is what spate keeps up with, and
  the latency includes the backlog the producer builds ahead of it.

For each, the p50 and p99 of `spate_delivery_latency_seconds` (from
/metrics, interpolated within buckets as Prometheus' histogram_quantile
does) and, as a check, the same quantiles computed exactly from the table
(the commit time of each row's part in system.part_log minus
`_timestamp`; merges stopped). The histogram stops the clock at the
acknowledgement, a little after the commit. (`ins`, now64() at parse, is
early by up to a streamed request's length.)

Reads build/services.env's variables (eval "$(scripts/services.sh env)").
Ends with one line:
  bench: freshness steady_rate=<int> steady_p50_s=<f> steady_p99_s=<f>
         table_p50_s=<f> table_p99_s=<f> p99_target_s=1.5 <met|missed>
         saturation_rows_per_s=<int> saturation_p50_s=<f> saturation_p99_s=<f>
"""
import os
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATE = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
BROKERS = os.environ["SPATE_TEST_BROKERS"]
CH = os.environ["SPATE_TEST_CLICKHOUSE_MODERN_URL"]
RATE = int(os.environ.get("BENCH_FRESH_RATE", "20000"))
SECONDS = int(os.environ.get("BENCH_FRESH_SECONDS", "20"))
BURST = int(os.environ.get("BENCH_FRESH_BURST", "2000000"))
P99_TARGET = 1.5
DB = "spate_bench_fresh"
COLUMNS = ("ts DateTime, user_id UInt64, event LowCardinality(String), country LowCardinality(String), "
           "value Float64, duration_ms UInt32, ok UInt8, tags Array(String), session String, page String, "
           "_timestamp DateTime64(3), ins DateTime64(3) MATERIALIZED now64(3)")
METRIC = "spate_delivery_latency_seconds"


def ch(sql):
    with urllib.request.urlopen(CH, data=sql.encode(), timeout=120) as r:
        return r.read().decode().strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return None


def wait(what, cond, timeout, every=0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"freshness bench: timed out waiting for {what}")
        time.sleep(every)


def buckets(metrics, table):
    """Cumulative (le, count) of the table's histogram, le ascending."""
    prefix = f'{METRIC}_bucket{{pipeline="main",table="{table}",le="'
    out = []
    for line in metrics.splitlines():
        if line.startswith(prefix):
            le, count = line[len(prefix):].split('"} ')
            out.append((float("inf") if le == "+Inf" else float(le), float(count)))
    return sorted(out)


def quantile(q, bs):
    total = bs[-1][1] if bs else 0.0
    rank = q * total
    lower = (0.0, 0.0)
    for le, count in bs:
        if count >= rank:
            if le == float("inf"):
                return lower[0]
            return lower[0] + (le - lower[0]) * (rank - lower[1]) / max(count - lower[1], 1e-12)
        lower = (le, count)
    return lower[0]


def run(label, gen_args, count):
    stamp = f"{label}_{os.getpid()}_{time.time_ns() % 10**9}"
    topic, table = f"bench_fresh_{stamp}", f"{DB}.t_{stamp}"
    ch(f"CREATE DATABASE IF NOT EXISTS {DB}")
    ch(f"CREATE TABLE {table} ({COLUMNS}) ENGINE = MergeTree() ORDER BY (ts, user_id)")
    # Rows stay in the parts their inserts made, whose commit time the
    # part log has.
    ch(f"SYSTEM STOP MERGES {table}")
    # The topic first, so spate is assigned its partitions before the
    # producer starts (a run begins with the gen's first event, not before).
    subprocess.run([SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", "0",
                    "--partitions", "4"], check=True, stderr=subprocess.DEVNULL, timeout=60)
    port = free_port()
    proc = subprocess.Popen([SPATE, "run", "--brokers", BROKERS, "--topic", topic,
                             "--group", f"g_{stamp}", "--clickhouse-url", CH, "--table", table,
                             "--admin-addr", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    try:
        # /readyz answers 200 (urlopen raises on 503) once the group is joined.
        wait("spate to join its group", lambda: get(port, "/readyz") is not None, 60)
        time.sleep(1)
        t0 = time.monotonic()
        subprocess.run([SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(count),
                        "--partitions", "4", *gen_args], check=True, stderr=subprocess.DEVNULL,
                       timeout=120 + count / 1000)
        produced = time.monotonic() - t0

        def all_in():
            return int(ch(f"SELECT count() FROM {table}")) >= count
        wait(f"{count} rows in {table}", all_in, 300)
        loaded = time.monotonic() - t0

        def counted():
            bs = buckets(get(port, "/metrics") or "", table)
            return bs if bs and bs[-1][1] >= count else None
        bs = wait("the histogram to count every row", counted, 30)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ch("SYSTEM FLUSH LOGS")
    name = table.split(".")[1]
    committed = (f"SELECT part_name, max(event_time_microseconds) AS at FROM system.part_log "
                 f"WHERE database = '{DB}' AND table = '{name}' AND event_type = 'NewPart' GROUP BY part_name")
    t50, t99 = (float(ch(f"SELECT quantileExact({q})(toFloat64(p.at) - toFloat64(r._timestamp)) "
                         f"FROM {table} AS r INNER JOIN ({committed}) AS p ON r._part = p.part_name "
                         f"FORMAT TSV")) for q in (0.5, 0.99))
    ch(f"DROP TABLE {table}")
    h50, h99 = quantile(0.5, bs), quantile(0.99, bs)
    print(f"{label:>10}: {count:,} events, produced at {count / produced:,.0f}/s, loaded at "
          f"{count / loaded:,.0f} rows/s; delivery latency p50 {h50:.3f} s, p99 {h99:.3f} s "
          f"(from the table: {t50:.3f} s, {t99:.3f} s)", flush=True)
    return count / produced, count / loaded, h50, h99, t50, t99


def main():
    steady = run("steady", ["--rate", str(RATE)], RATE * SECONDS)
    burst = run("saturation", [], BURST)
    met = "met" if steady[3] <= P99_TARGET else "missed"
    print(f"bench: freshness steady_rate={steady[0]:.0f} steady_p50_s={steady[2]:.3f} "
          f"steady_p99_s={steady[3]:.3f} table_p50_s={steady[4]:.3f} table_p99_s={steady[5]:.3f} "
          f"p99_target_s={P99_TARGET} {met} saturation_rows_per_s={burst[1]:.0f} "
          f"saturation_p50_s={burst[2]:.3f} saturation_p99_s={burst[3]:.3f}")


if __name__ == "__main__":
    main()
