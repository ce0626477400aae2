"""Peers of spate, measured the way bench/bench.py measures spate (stdlib only).

kafka_engine(): ClickHouse's own Kafka table engine (ENGINE = Kafka + a
MATERIALIZED VIEW into a MergeTree table) consuming a topic from the local
broker, on the extra ClickHouse server of scripts/kafka-engine.sh (Debian's
clickhouse-server 18.16 with librdkafka 2.12.1 built from cargo's registry,
because Debian's librdkafka 2.0.2 cannot talk to tansu).

Run by hand (produces fresh topics with `spate gen`, then measures):
    python3 bench/peers.py [--messages 1000000] [--partitions 4,8] [--consumers 1,P]
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA_ENGINE_SH = os.path.join(ROOT, "scripts", "kafka-engine.sh")

# The columns of the brief; JSONEachRow skips the event's other fields (the
# 18.16 Kafka engine always sets input_format_skip_unknown_fields=1).
DEFAULT_COLUMNS = [
    ("ts", "DateTime"),
    ("user_id", "UInt64"),
    ("event", "LowCardinality(String)"),
    ("value", "Float64"),
    ("tags", "Array(String)"),
]
DATABASE = "kafka_bench"
SAMPLE_S = 0.1


def _ch(url, sql, timeout=60, **settings):
    q = urllib.parse.urlencode(settings)
    req = urllib.request.Request(f"{url}/?{q}", data=sql.encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode().strip()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"ClickHouse {url}: {e.read().decode(errors='replace').strip()[:500]}") from None


def _cpu_s(pid):
    """user+sys CPU seconds of process PID so far (all its threads)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kafka_engine_server(timeout=900):
    """(url, pid, librdkafka) of the Kafka-engine ClickHouse: the one named by
    KAFKA_ENGINE_CH_URL + KAFKA_ENGINE_CH_PID if set, else `scripts/kafka-engine.sh up`
    (idempotent; builds librdkafka on first use, ~1 min)."""
    url, pid = os.environ.get("KAFKA_ENGINE_CH_URL"), os.environ.get("KAFKA_ENGINE_CH_PID")
    lib = os.environ.get("KAFKA_ENGINE_LIBRDKAFKA", "")
    if not (url and pid):
        out = subprocess.run(["bash", KAFKA_ENGINE_SH, "up"], check=True, stdout=subprocess.PIPE,
                             text=True, timeout=timeout).stdout
        env = {}
        for line in out.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export "):].split("=", 1)
                env[k] = v
        url, pid, lib = env["KAFKA_ENGINE_CH_URL"], env["KAFKA_ENGINE_CH_PID"], env.get("KAFKA_ENGINE_LIBRDKAFKA", "")
    return url, int(pid), lib


def _steady_rate(samples, total):
    """rows/s between the first samples at >= 10% and >= 90% of total."""
    lo = next((s for s in samples if s[1] >= 0.1 * total), None)
    hi = next((s for s in samples if s[1] >= 0.9 * total), None)
    if lo is None or hi is None or hi[0] <= lo[0]:
        return None
    return (hi[1] - lo[1]) / (hi[0] - lo[0])


def kafka_engine(brokers, topic, messages, partitions, num_consumers=None, columns=None,
                 max_block_size=None, timeout_s=None, settle_s=3.0, keep_table=False,
                 order_by="tuple()"):
    """Consume `messages` JSON events of `topic` with ClickHouse's Kafka engine.

    Creates a fresh MergeTree table, a Kafka table (fresh kafka_group_name, so
    it starts at the beginning of the topic: the server sets
    auto.offset.reset=smallest) and a materialized view between them; samples
    count() of the table every 100 ms until it reaches `messages` (deadline
    timeout_s, default 60 s + messages/50k s; also gives up after 30 s without
    progress), then drops the view and the Kafka table so it stops consuming.

    num_consumers: kafka_num_consumers (default: partitions; 18.16 accepts more
    consumers than cores, and one per partition gave the shortest wall time
    on 2 cores).

    Returns rows_per_s (steady, between 10% and 90% of `messages`; None if not
    reached), server_cpu_s_per_million (user+sys of the server process from
    the Kafka table's creation to the last row, per million rows counted then),
    rows (count() after `settle_s` more seconds, before dropping), wall_s
    (creation to the last row, group join included), first_row_s, and
    duplicates / missing / complete / timed_out instead of hanging or raising
    when the engine delivers more or fewer rows than `messages`.
    """
    if num_consumers is None:
        num_consumers = max(1, partitions)
    columns = columns or DEFAULT_COLUMNS
    if timeout_s is None:
        timeout_s = 60 + messages / 50_000
    url, pid, lib = kafka_engine_server()
    stamp = int(time.time() * 1000)
    name = f"t{stamp}_{num_consumers}c"
    target, queue, view = f"{DATABASE}.{name}", f"{DATABASE}.{name}_queue", f"{DATABASE}.{name}_mv"
    group = f"kafka_engine_{topic}_{stamp}"
    cols = ", ".join(f"{n} {t}" for n, t in columns)
    names = ", ".join(n for n, _ in columns)

    _ch(url, f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    _ch(url, f"CREATE TABLE {target} ({cols}) ENGINE = MergeTree() ORDER BY {order_by}",
        allow_experimental_low_cardinality_type=1)
    settings = [
        f"kafka_broker_list = '{brokers}'",
        f"kafka_topic_list = '{topic}'",
        f"kafka_group_name = '{group}'",
        "kafka_format = 'JSONEachRow'",
        "kafka_row_delimiter = '\\n'",
        f"kafka_num_consumers = {int(num_consumers)}",
    ]
    if max_block_size:
        settings.append(f"kafka_max_block_size = {int(max_block_size)}")
    result = {
        "rows_per_s": None, "server_cpu_s_per_million": None, "rows": 0, "wall_s": None,
        "expected": messages, "num_consumers": num_consumers, "partitions": partitions,
        "topic": topic, "group": group, "table": target, "clickhouse": url, "librdkafka": lib,
    }
    samples = []
    try:
        cpu0 = _cpu_s(pid)
        t0 = time.monotonic()
        _ch(url, f"CREATE TABLE {queue} ({cols}) ENGINE = Kafka SETTINGS " + ", ".join(settings),
            allow_experimental_low_cardinality_type=1)
        _ch(url, f"CREATE MATERIALIZED VIEW {view} TO {target} AS SELECT {names} FROM {queue}",
            allow_experimental_low_cardinality_type=1)
        deadline = t0 + timeout_s
        count, cpu1, t_done, last_change = 0, None, None, t0
        while True:
            now = time.monotonic()
            # From the parts' metadata: count() reads a column of every part
            # on 18.16, which would add to the server CPU being measured.
            c = int(_ch(url, "SELECT sum(rows) FROM system.parts WHERE database = "
                        f"'{DATABASE}' AND table = '{name}' AND active", timeout=10) or 0)
            t = time.monotonic()
            if c != count:
                last_change = t
            count = c
            samples.append((t - t0, count))
            if count >= messages:
                cpu1, t_done = _cpu_s(pid), t
                break
            if t > deadline or (count > 0 and t - last_change > 30):
                cpu1, t_done = _cpu_s(pid), last_change
                result["timed_out"] = True
                break
            time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - now)))
        first = next((s[0] for s in samples if s[1] > 0), None)
        result["first_row_s"] = round(first, 2) if first is not None else None
        result["wall_s"] = round(t_done - t0, 2)
        result["server_cpu_s"] = round(cpu1 - cpu0, 2)
        if count:
            result["server_cpu_s_per_million"] = (cpu1 - cpu0) / (count / 1e6)
        result["rows_per_s"] = _steady_rate(samples, messages)
        # coarser but less quantised: from the first part written to the last row
        # (the view writes parts of min_insert_block_size_rows; see kafka-engine.sh)
        first_s = next((s for s in samples if s[1] > 0), None)
        if first_s and count > first_s[1] and t_done - t0 > first_s[0]:
            result["rows_per_s_after_first_part"] = (count - first_s[1]) / (t_done - t0 - first_s[0])
        # the count's change points, (s since CREATE, rows): shows the engine's bursts
        result["steps"] = [(round(t, 2), c) for i, (t, c) in enumerate(samples)
                           if i == 0 or c != samples[i - 1][1]]
        # late (duplicate) deliveries: the engine commits offsets after each block
        time.sleep(settle_s if count >= messages else 0)
        count = int(_ch(url, f"SELECT count() FROM {target}", timeout=30))
    finally:
        for t in (view, queue):  # stop consuming first
            try:
                _ch(url, f"DROP TABLE IF EXISTS {t}", timeout=120)
            except Exception as e:  # reported, the next run uses fresh names anyway
                result.setdefault("drop_errors", []).append(f"{t}: {e}")
    result["rows"] = count
    result["duplicates"] = max(0, count - messages)
    result["missing"] = max(0, messages - count)
    result["complete"] = count == messages
    result.setdefault("timed_out", False)
    if not keep_table:
        try:
            _ch(url, f"DROP TABLE IF EXISTS {target}", timeout=120)
        except Exception as e:
            result.setdefault("drop_errors", []).append(f"{target}: {e}")
    return result


# --------------------------------------------------------------- by hand ----

def _brokers():
    b = os.environ.get("SPATE_TEST_BROKERS")
    if b:
        return b
    env = os.path.join(os.environ.get("SPATE_BUILD_DIR", os.path.join(ROOT, "build")), "services.env")
    for line in open(env):
        if line.startswith("export SPATE_TEST_BROKERS="):
            return line.strip().split("=", 1)[1]
    sys.exit("SPATE_TEST_BROKERS not set and not in build/services.env: make services first")


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", default="4,8", help="comma-separated; one fresh topic each")
    ap.add_argument("--consumers", default="1,P", help="kafka_num_consumers values; P = partitions")
    ap.add_argument("--topic", help="use this existing topic (with --partitions N) instead of producing")
    args = ap.parse_args()
    brokers = _brokers()
    spate = os.environ.get("SPATE_BIN", os.path.join(ROOT, "target", "release", "spate"))
    results = []
    for p in [int(x) for x in args.partitions.split(",")]:
        topic = args.topic
        if not topic:
            topic = f"kafka-engine-{p}p-{int(time.time())}"
            t = time.monotonic()
            subprocess.run([spate, "gen", "--brokers", brokers, "--topic", topic, "--count", str(args.messages),
                            "--partitions", str(p)], check=True, stderr=subprocess.DEVNULL,
                           timeout=60 + args.messages / 10_000)
            print(f"produced {args.messages:,} events to {topic} ({p} partitions) in "
                  f"{time.monotonic() - t:.1f} s", flush=True)
        for c in args.consumers.split(","):
            n = p if c == "P" else int(c)
            r = kafka_engine(brokers, topic, args.messages, p, num_consumers=n)
            results.append(r)
            print(json.dumps(r), flush=True)
            rate = r["rows_per_s"]
            print(f"  {p} partitions, kafka_num_consumers={n}: "
                  f"{rate:,.0f} rows/s steady, " if rate else f"  {p} partitions, kafka_num_consumers={n}: no steady rate, ",
                  f"server {r['server_cpu_s_per_million'] or float('nan'):.2f} CPU s/M rows, "
                  f"wall {r['wall_s']} s (first row {r.get('first_row_s')} s), rows {r['rows']:,}"
                  f"{'' if r['complete'] else ' INCOMPLETE/DUPLICATES'}", sep="", flush=True)
    return results


if __name__ == "__main__":
    main()
