#!/usr/bin/env python3
"""spate benchmarks against the local services (make services).

Suites (BENCH_SUITE, comma-separated; default "e2e,formats,delivery", so
`make bench` reports the formats and the exactly-once ratios in the same run):

- e2e: the figures of the benchmark issue, in one run on the same data.
  1. micro: `cargo bench --bench hot_path` (criterion); ns per row and MB/s of
     decoding + routing + RowBinary encoding, small and wide events.
  2. Preloads BENCH_MESSAGES small events (default 5,000,000; `spate gen`,
     BENCH_PARTITIONS=8) into a fresh topic.
  3. Alternating BENCH_REPEAT times (default 3), on that topic:
     - the consume ceiling: a bare rdkafka consumer (examples/consume_ceiling)
       that reads every partition to EOF and discards;
     - spate: `spate run --until-end` with its default flags into a fresh
       MergeTree table;
     - the insert ceiling: `clickhouse-client` inserting the same rows from a
       RowBinary file encoded beforehand;
     - spate with one insert request per batch (`--insert-request 0`);
     - spate on BENCH_WIDE_MESSAGES wide events (default a quarter of
       BENCH_MESSAGES; 0 for none), for their rows per spate core.
  4. Peers (BENCH_PEERS, default "kafka-engine"; "" for none): ClickHouse's
     Kafka engine + a materialized view consuming the same topic.
  5. Throughput against --batch-rows 10k, 50k, 100k, 500k (a PNG plot).
  Every figure is the median over the repeats. spate's rate is reported as a
  fraction of the lower ceiling, and issue 20's targets are checked, each a
  ratio of two figures of this run (issue20_targets): one line per target
  at the end of the output,
    bench: target <name> ratio=<float>|none limit=<=<float>|>=<float> met|missed
  just above the summary lines.

- backpressure: the default memory budget against one too large to ever
  pause a lane (the ratio of steady rates; issue: within 5%).

- delivery: `--delivery exactly-once` against at-least-once (streamed
  requests, the default) and at-least-once with one request per batch
  (`--insert-request 0`), alternated in one run on the same data, all into
  a fresh ReplicatedMergeTree table with the `_partition` and `_offset`
  columns (what exactly-once needs on 18.16; the suite's ZooKeeper): the ratios of steady rows/s, of CPU seconds per
  million rows and of the server's CPU per million rows (issues 19, 33).
- formats: the same small events as JSON, as Avro and as Protobuf
  (Confluent wire format, `spate gen --format avro|protobuf` through
  scripts/schema_registry.py), alternated BENCH_REPEAT times in one run:
  steady rows/s, CPU s per million rows and peak RSS of `spate run` per
  format, and each format's ratio to JSON (issue 18).

- scaling: issue 20's "cost as the work grows": one `spate run` with
  default flags per configuration of BENCH_SCALING_PARTITIONS partitions
  (default 8,64,256) x the small (10 columns) and wide (50 columns) events
  x one shard (cluster node a) and two shards (`--cluster
  spate_two_shards`, nodes a and b). Each (events, partitions) gets a fresh
  topic of BENCH_SCALING_MESSAGES small events (default 2,000,000) or
  BENCH_SCALING_WIDE_MESSAGES wide ones (default a quarter of that: a wide
  run then takes about as long), read by both shard counts. Per run:
  steady rows/s, spate CPU and the shards' servers' CPU (summed) per
  million rows, peak RSS, inserts, rows per insert, inserts per second
  per shard and the librdkafka prefetch per partition spate set (from its
  log); then each figure's growth as the median ratio between runs that
  differ in one dimension only.

Measurement, for spate and the consume ceiling alike:
- steady rows/s: the rate between 10% and 90% of the rows (for spate from
  the rows of the table's active parts in system.parts, sampled every
  50 ms), so that start-up and the group join (session.timeout.ms/2)
  are excluded;
- CPU seconds per million rows of the process (user+sys, from wait4);
- peak RSS of the process (ru_maxrss);
- for spate also the ClickHouse server's CPU over the run (/proc/PID/stat).

Results go to bench/results/<suite>-<date>.md (and .png); each suite prints
a summary line, and the last line printed is the e2e suite's (when it ran),
in a fixed form for tools to track:
  bench: rows_per_s=<int> cpu_s_per_million=<float> fraction_of_ceiling=<float> peak_rss_mib=<int>
The scaling suite's line (ratios as in its growth table; NNNp the most and
fewest partitions measured):
  bench: scaling configs=<int> rows_per_s_min=<int> rows_per_s_max=<int>
    rows_per_s_NNNp_vs_NNp=<float> rows_per_s_2_shards_vs_1=<float> cpu_wide_vs_small=<float>
    server_cpu_2_shards_vs_1=<float> peak_rss_mib_max=<int>
The formats suite's line:
  bench: formats json_rows_per_s=<int> avro_rows_per_s=<int> protobuf_rows_per_s=<int>
    avro_rate_ratio=<float> protobuf_rate_ratio=<float> avro_cpu_ratio=<float> protobuf_cpu_ratio=<float>
"""

import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SPATE = os.environ.get("SPATE_BIN", os.path.join(TARGET, "release", "spate"))
CONSUME_CEILING = os.path.join(TARGET, "release", "examples", "consume_ceiling")
BROKERS = os.environ["SPATE_TEST_BROKERS"]
CH = os.environ["SPATE_TEST_CLICKHOUSE_URL"]
CH_TCP = os.environ.get("SPATE_TEST_CLICKHOUSE_TCP", "127.0.0.1:9000")
CH_PID_FILE = os.environ.get("SPATE_TEST_CLICKHOUSE_PID_FILE")
MESSAGES = int(os.environ.get("BENCH_MESSAGES", "5000000"))
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "8"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))
# The e2e suite's wide events, for their rows per spate core (0: none).
E2E_WIDE_MESSAGES = int(os.environ.get("BENCH_WIDE_MESSAGES", str(MESSAGES // 4)))
MICRO = os.environ.get("BENCH_MICRO", "1") != "0"
PEERS = [p for p in os.environ.get("BENCH_PEERS", "kafka-engine").split(",") if p]
SWEEP = [int(x) for x in os.environ.get("BENCH_BATCH_ROWS", "10000,50000,100000,500000").split(",") if x]
# One run of BENCH_MESSAGES may take at most this long (run_timeout).
RUN_TIMEOUT = 60 + 20 * MESSAGES / 1e6
DEFAULT_BUDGET_MIB = 256  # spate's default --max-buffered-bytes

# The small event of `spate gen` (src/events.rs). spate and the Kafka engine
# load the same table. `session` is unique per event (an odd multiple of the
# event number), so count() = uniqExact(session) = N shows that every
# message arrived exactly once.
ORDER_BY = "(ts, user_id)"
SMALL_COLUMNS = [
    ("ts", "DateTime"),
    ("user_id", "UInt64"),
    ("event", "LowCardinality(String)"),
    ("country", "LowCardinality(String)"),
    ("value", "Float64"),
    ("duration_ms", "UInt32"),
    ("ok", "UInt8"),
    ("tags", "Array(String)"),
    ("session", "String"),
    ("page", "String"),
]


def rust_columns(const):
    """The (name, type) pairs of a column list of src/events.rs, read from
    the source, so the bench and `spate gen` cannot disagree."""
    import re
    src = open(os.path.join(ROOT, "src", "events.rs")).read()
    body = re.search(rf"pub const {const}: &\[\(&str, &str\)\] = &\[(.*?)\n\];", src, re.S).group(1)
    return re.findall(r'\("([^"]+)", "([^"]+)"\)', body)


class Schema:
    """An event schema of `spate gen --schema NAME`: the table's columns and
    sorting key, and the expression that is unique per event, so that
    count() = uniqExact(unique) = N shows every message arrived once."""

    def __init__(self, name, columns, unique, order_by=ORDER_BY):
        self.name, self.columns, self.unique, self.order_by = name, columns, unique, order_by


SMALL = Schema("small", SMALL_COLUMNS, "session")
# With the columns spate fills with each row's Kafka coordinates: what
# exactly-once needs on 18.16 (block hashes of distinct batches must
# differ); the delivery suite gives them to every mode alike.
SMALL_COORDINATES = Schema("small", SMALL_COLUMNS + [("_partition", "Int32"), ("_offset", "UInt64")], "session")
# The wide event has no per-event string like `session`, but (ts, user_id)
# is unique per event in both schemas (src/events.rs): ts = 1.7e9 + i / 100
# and user_id = i * 2654435761 mod 100000, a bijection of i mod 100000
# (2654435761 is prime to 2 and 5), so the 100 events of one ts have 100
# distinct user_ids.
WIDE = Schema("wide", rust_columns("WIDE_COLUMNS"), "ts, user_id")
assert SMALL_COLUMNS == rust_columns("SMALL_COLUMNS"), "SMALL_COLUMNS differs from src/events.rs"


class Servers:
    """Where a run's rows go: the servers spate inserts into (HTTP URL and
    PID file of each, for its CPU), the flags that point spate at them, and
    for several shards the cluster a Distributed table reads them through
    (on the first server) for the checks."""

    def __init__(self, name, urls, pid_files, flags, cluster=None):
        self.name, self.urls, self.pid_files, self.flags, self.cluster = name, urls, pid_files, flags, cluster

    def create(self, name, replicated=False, schema=None):
        """A fresh table `name` on every server; (table spate writes to, table the checks read)."""
        for url in self.urls:
            table = fresh_table(name, replicated, schema, server=url)
            drop_table(table, url)
        if not self.cluster:
            return table, table
        db, local = table.split(".")
        cols = ", ".join(f"{n} {t}" for n, t in (schema or SMALL).columns)
        everywhere = f"{table}_all"
        ch(f"DROP TABLE IF EXISTS {everywhere}", server=self.urls[0])
        ch(f"CREATE TABLE {everywhere} ({cols}) ENGINE = Distributed({self.cluster}, {db}, {local})",
           server=self.urls[0], allow_experimental_low_cardinality_type=1)
        drop_table(everywhere, self.urls[0])
        return table, everywhere

    def rows_so_far(self, table):
        return sum(rows_so_far(table, url) for url in self.urls)

    def inserted_parts(self, table):
        return sum(inserted_parts(table, url) for url in self.urls)

    def cpu_s(self):
        """The servers' user+sys CPU seconds so far, summed; None if one is unknown."""
        cpus = [server_cpu_s(p) for p in self.pid_files]
        return None if None in cpus else sum(cpus)


# The bench's server (SPATE_TEST_CLICKHOUSE_URL): every suite but scaling.
LOCAL = Servers("local", [CH], [CH_PID_FILE], ["--clickhouse-url", CH])


def log(msg):
    print(msg, flush=True)


def ch(sql, timeout=120, server=None, **settings):
    """One statement on `server` (an HTTP URL; default the bench's server)."""
    q = urllib.parse.urlencode(settings)
    with urllib.request.urlopen(f"{server or CH}/?{q}", data=sql.encode(), timeout=timeout) as r:
        return r.read().decode().strip()


def fresh_table(name, replicated=False, schema=None, server=None):
    """A fresh MergeTree spate_bench.<name> with the columns of `schema`
    (default the small event's) on `server` (default the bench's)."""
    schema = schema or SMALL
    ch("CREATE DATABASE IF NOT EXISTS spate_bench", server=server)
    ch(f"DROP TABLE IF EXISTS spate_bench.{name}", server=server)
    cols = ", ".join(f"{n} {t}" for n, t in schema.columns)
    engine = "MergeTree()"
    if replicated:
        engine = f"ReplicatedMergeTree('/clickhouse/tables/spate_bench/{name}_{time.time_ns()}', 'r1')"
    ch(f"CREATE TABLE spate_bench.{name} ({cols}) ENGINE = {engine} ORDER BY {schema.order_by}",
       server=server, allow_experimental_low_cardinality_type=1)
    return f"spate_bench.{name}"


# Tables are dropped at the end of a suite, not after each run: the files of
# a dropped table are "recently deleted" inodes, and ext4 makes the next run's
# part files slow to create (find_inode_bit/recently_deleted were 16% of the
# server's CPU in a profile when tables were dropped between runs).
DROP_LATER = []


def drop_table(table, server=None):
    DROP_LATER.append((table, server))


def drop_tables():
    while DROP_LATER:
        table, server = DROP_LATER.pop()
        ch(f"DROP TABLE IF EXISTS {table}", server=server)


def rows_so_far(table, server=None):
    """Rows in `table` from the parts' metadata. Unlike count(), which on
    18.16 reads a column of every part, this costs the server next to
    nothing, so sampling it every 50 ms does not load the server whose CPU
    is being measured."""
    db, name = table.split(".")
    return int(ch(f"SELECT sum(rows) FROM system.parts WHERE database = '{db}' AND table = '{name}' AND active",
                  timeout=5, server=server) or 0)


def inserted_parts(table, server=None):
    """Parts the inserts into `table` created: the level-0 parts, active or
    already merged away (the server keeps merged parts for
    old_parts_lifetime, 8 minutes, and tables are dropped at the end of a
    suite). One insert of fewer than max_insert_block_size rows makes one."""
    db, name = table.split(".")
    return int(ch(f"SELECT countIf(level = 0) FROM system.parts WHERE database = '{db}' AND table = '{name}'",
                  server=server) or 0)


def server_cpu_s(pid_file=None):
    """user+sys CPU seconds of a ClickHouse server so far (by its PID file,
    default the bench's server), or None."""
    pid_file = pid_file or CH_PID_FILE
    if not pid_file or not os.path.exists(pid_file):
        return None
    try:
        pid = open(pid_file).read().strip()
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def wait_child(proc, label, timeout, on_tick=None, tick=0.05):
    """wait4 the child with a deadline; returns (status, rusage)."""
    started = time.monotonic()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid != 0:
            return status, usage
        if time.monotonic() - started > timeout:
            proc.kill()
            proc.wait()
            sys.exit(f"bench: {label} did not finish within {timeout:.0f}s")
        if on_tick:
            on_tick()
        time.sleep(tick)


def run_timeout(messages):
    """The longest one run of `messages` may take: 60 s plus 20 s per million rows."""
    return 60 + 20 * messages / 1e6


def preload(topic, messages=None, partitions=None, schema=None):
    """`spate gen` of `messages` events (default BENCH_MESSAGES) of `schema`
    (default small) into a fresh topic of `partitions` (default
    BENCH_PARTITIONS); seconds it took."""
    messages = messages or MESSAGES
    t0 = time.monotonic()
    subprocess.run(
        [SPATE, "gen", "--brokers", BROKERS, "--topic", topic, "--count", str(messages),
         "--partitions", str(partitions or PARTITIONS), "--schema", (schema or SMALL).name],
        check=True, stderr=subprocess.DEVNULL, timeout=run_timeout(messages),
    )
    return time.monotonic() - t0


def steady_rate(samples, total):
    lo = next(s for s in samples if s[1] >= 0.1 * total)
    hi = next(s for s in samples if s[1] >= 0.9 * total)
    return (hi[1] - lo[1]) / max(hi[0] - lo[0], 1e-9)


# ---------------------------------------------------------------- runs ----

def run_spate(topic, label, extra, keep=False, replicated=False, servers=LOCAL, schema=None, messages=None,
              log_level="warn", wrap=()):
    """One `spate run --until-end` into a fresh table on `servers` (default
    the bench's server) with the columns of `schema` (default small), the
    topic holding `messages` events (default BENCH_MESSAGES); figures of
    the run (server CPU: the sum over `servers`). With a `log_level` other
    than warn, the result has spate's log (its stderr) as "log". `wrap`
    is a command to run spate under (e.g. `perf record ... --`)."""
    schema, messages = schema or SMALL, messages or MESSAGES
    label_table = label.replace("-", "_")
    if servers is LOCAL:
        table = check = fresh_table(label_table, replicated, schema)
    else:
        table, check = servers.create(label_table, replicated, schema)
    group = f"bench_{label}_{int(time.time() * 1000)}"
    args = list(wrap) + [SPATE, "run", "--brokers", BROKERS, "--topic", topic, "--group", group,
            "--table", table, "--until-end", "-X", "session.timeout.ms=6000",
            "--log-level", log_level] + servers.flags + extra
    errlog = tempfile.TemporaryFile(mode="w+")
    samples = []

    def sample():
        try:
            samples.append((time.monotonic(), servers.rows_so_far(table)))
        except Exception:
            pass

    server0 = servers.cpu_s()
    started = time.monotonic()
    proc = subprocess.Popen(args, stderr=errlog)
    status, usage = wait_child(proc, label, run_timeout(messages), on_tick=sample)
    wall = time.monotonic() - started
    server1 = servers.cpu_s()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        errlog.seek(0)
        sys.exit(f"bench: {label} exited {code}:\n{errlog.read()[-2000:]}")
    first = servers.urls[0]
    rows = int(ch(f"SELECT count() FROM {check}", server=first))
    samples.append((time.monotonic(), rows))
    distinct = int(ch(f"SELECT uniqExact({schema.unique}) FROM {check}", server=first))
    if distinct != messages:
        sys.exit(f"bench: {label}: {distinct} of {messages} messages arrived")
    cpu = usage.ru_utime + usage.ru_stime
    # From the first inserted rows to the last: the time the inserts ran.
    first_rows = next((t for t, n in samples if n > 0), samples[-1][0])
    last_rows = next(t for t, n in samples if n >= messages)
    result = {
        "label": label,
        "rows": rows,
        "insert_s": last_rows - first_rows,
        "duplicates": rows - distinct,
        "wall_s": wall,
        "rows_per_s": steady_rate(samples, messages),
        "cpu_s_per_million": cpu / (rows / 1e6),
        "server_cpu_s_per_million": (server1 - server0) / (rows / 1e6) if server0 is not None else None,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "sys_cpu_s_per_million": usage.ru_stime / (rows / 1e6),
        "minor_faults_per_row": usage.ru_minflt / rows,
        "args": " ".join(extra),
        "inserts": servers.inserted_parts(table),
    }
    if log_level != "warn":
        errlog.seek(0)
        result["log"] = errlog.read()
    if keep:
        result["table"] = table
    elif servers is LOCAL:
        drop_table(table)
    return result


def run_consume_ceiling(topic, label):
    proc = subprocess.Popen([CONSUME_CEILING, BROKERS, topic], stdout=subprocess.PIPE)
    status, usage = wait_child(proc, label, RUN_TIMEOUT)
    out = proc.stdout.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {label} failed")
    r = json.loads(out.strip().splitlines()[-1])
    if r["messages"] != MESSAGES:
        sys.exit(f"bench: {label} read {r['messages']} of {MESSAGES} messages")
    return {
        "label": label,
        "rows_per_s": r["rows_per_s"],
        "payload_bytes": r["bytes"],
        "cpu_s_per_million": (usage.ru_utime + usage.ru_stime) / (MESSAGES / 1e6),
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def export_rowbinary(table, path):
    """The rows of `table` (spate's load) as one RowBinary file."""
    host, port = CH_TCP.rsplit(":", 1)
    cols = ", ".join(n for n, _ in SMALL_COLUMNS)
    with open(path, "wb") as f:
        subprocess.run(["clickhouse-client", "--host", host, "--port", port, "--query",
                        f"SELECT {cols} FROM {table} FORMAT RowBinary"],
                       stdout=f, check=True, timeout=RUN_TIMEOUT)
    return os.path.getsize(path)


def run_insert_ceiling(path, label):
    """clickhouse-client inserting the pre-encoded RowBinary file."""
    host, port = CH_TCP.rsplit(":", 1)
    table = fresh_table(label.replace("-", "_"))
    cols = ", ".join(n for n, _ in SMALL_COLUMNS)
    server0 = server_cpu_s()
    started = time.monotonic()
    with open(path, "rb") as f:
        proc = subprocess.Popen(["clickhouse-client", "--host", host, "--port", port, "--query",
                                 f"INSERT INTO {table} ({cols}) FORMAT RowBinary"], stdin=f)
        status, usage = wait_child(proc, label, RUN_TIMEOUT)
    wall = time.monotonic() - started
    server1 = server_cpu_s()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {label}: clickhouse-client failed")
    rows = int(ch(f"SELECT count() FROM {table}"))
    drop_table(table)
    if rows != MESSAGES:
        sys.exit(f"bench: {label} inserted {rows} of {MESSAGES} rows")
    return {
        "label": label,
        "rows_per_s": rows / wall,
        "wall_s": wall,
        "client_cpu_s_per_million": (usage.ru_utime + usage.ru_stime) / (rows / 1e6),
        "server_cpu_s_per_million": (server1 - server0) / (rows / 1e6) if server0 is not None else None,
    }


def run_micro():
    """criterion's hot-path benchmarks; one dict per benchmark."""
    log("bench: micro benchmarks (cargo bench --bench hot_path)")
    subprocess.run(["cargo", "bench", "--bench", "hot_path", "--", "--noplot"], cwd=ROOT, check=True,
                   timeout=1200)
    results = []
    for bj in sorted(glob.glob(os.path.join(TARGET, "criterion", "**", "new", "benchmark.json"),
                               recursive=True)):
        with open(bj) as f:
            meta = json.load(f)
        with open(os.path.join(os.path.dirname(bj), "estimates.json")) as f:
            est = json.load(f)
        ns = est["mean"]["point_estimate"]  # per iteration
        thr = meta.get("throughput") or {}
        rows = thr.get("Elements")
        nbytes = thr.get("Bytes")
        results.append({
            "id": meta["full_id"],
            "ns_per_iter": ns,
            "rows": rows,
            "bytes": nbytes,
        })
    return results


def micro_rows(results):
    """Joins the Elements and Bytes measurements of one benchmark:
    (name, ns/row, MB/s); criterion gives each group one throughput kind."""
    by_name = {}
    for r in results:
        group, _, name = r["id"].partition("/")
        entry = by_name.setdefault(name, {})
        if r["rows"]:
            entry["ns_per_row"] = r["ns_per_iter"] / r["rows"]
        if r["bytes"]:
            entry["mb_per_s"] = r["bytes"] / r["ns_per_iter"] * 1e9 / 1e6
    return [(n, e.get("ns_per_row"), e.get("mb_per_s")) for n, e in sorted(by_name.items())]


# --------------------------------------------------------------- output ----

def fmt(x, spec=",.0f"):
    return "—" if x is None else format(x, spec)


def plot_batch_rows(sweep, path):
    try:
        import matplotlib
    except ImportError:
        # `make bench` runs in a venv with matplotlib; run by hand without
        # it, the figures still count, only the plot is left out.
        print("bench: matplotlib not installed; batch-rows plot skipped", flush=True)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = [r["batch_rows"] for r in sweep]
    ys = [r["rows_per_s"] / 1e3 for r in sweep]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(xs, ys, marker="o", label="spate steady rows/s")
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x // 1000}k" for x in xs])
    ax.set_xlabel("--batch-rows")
    ax.set_ylabel("thousand rows/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"spate throughput against --batch-rows ({MESSAGES:,} small events, {os.cpu_count()} cores)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def suite_e2e(topic, date):
    md = []
    micro = run_micro() if MICRO else []
    micro_table = micro_rows(micro)
    payload_bytes = None
    consume, spate, insert, per_batch, wide = [], [], [], [], []
    # Wide events (50 columns, ~1 KB) for their rows per spate core
    # (issue 33): a quarter of the rows, as in the scaling suite.
    wide_topic = None
    if E2E_WIDE_MESSAGES:
        wide_topic = f"{topic}_wide"
        secs = preload(wide_topic, E2E_WIDE_MESSAGES, PARTITIONS, WIDE)
        log(f"  preloaded {E2E_WIDE_MESSAGES:,} wide events in {secs:.1f}s")
    rowbinary = os.path.join(tempfile.gettempdir(), f"spate-bench-{os.getpid()}.rowbinary")
    try:
        for i in range(REPEAT):
            c = run_consume_ceiling(topic, f"consume-ceiling-{i}")
            consume.append(c)
            payload_bytes = c["payload_bytes"]
            s = run_spate(topic, f"spate-{i}", [], keep=(i == 0))
            spate.append(s)
            # The same with one insert request per batch, as before inserts
            # were streamed (issue 33): before/after, one run.
            per_batch.append(run_spate(topic, f"spate-insert-request-0-{i}", ["--insert-request", "0"]))
            if wide_topic:
                wide.append(run_spate(wide_topic, f"spate-wide-{i}", [], schema=WIDE, messages=E2E_WIDE_MESSAGES))
            if i == 0:
                size = export_rowbinary(s["table"], rowbinary)
                drop_table(s["table"])
                log(f"  RowBinary file: {size / 2**20:.0f} MiB")
            ins = run_insert_ceiling(rowbinary, f"insert-ceiling-{i}")
            insert.append(ins)
            log(f"  round {i}: consume ceiling {c['rows_per_s']:,.0f}/s, spate {s['rows_per_s']:,.0f}/s "
                f"({s['cpu_s_per_million']:.2f} CPU s/M, {s['peak_rss_mib']:.0f} MiB, {s['inserts']} inserts; "
                f"--insert-request 0: {per_batch[-1]['rows_per_s']:,.0f}/s, {per_batch[-1]['inserts']} inserts), "
                f"insert ceiling {ins['rows_per_s']:,.0f}/s")
    finally:
        if os.path.exists(rowbinary):
            os.remove(rowbinary)

    def med(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    avg_bytes = payload_bytes / MESSAGES
    rate = med(spate, "rows_per_s")
    cpu = med(spate, "cpu_s_per_million")
    server_cpu = med(spate, "server_cpu_s_per_million")
    rss = max(r["peak_rss_mib"] for r in spate)
    consume_rate = med(consume, "rows_per_s")
    insert_rate = med(insert, "rows_per_s")
    ceiling = min(consume_rate, insert_rate)
    fraction = rate / ceiling

    peers = []
    for peer in PEERS:
        log(f"bench: peer {peer}")
        try:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import peers as peer_mod  # bench/peers.py
            if peer == "kafka-engine":
                r = peer_mod.kafka_engine(BROKERS, topic, MESSAGES, PARTITIONS,
                                          columns=SMALL_COLUMNS, order_by=ORDER_BY)
            else:
                raise ValueError(f"unknown peer {peer}")
            r["label"] = peer
            if not r.get("complete"):
                r["label"] += f" (rows {r.get('rows')} of {MESSAGES})"
            peers.append(r)
            log(f"  {peer}: {r['rows_per_s']:,.0f} rows/s, server {r['server_cpu_s_per_million']:.2f} CPU s/M")
        except Exception as e:  # a peer that cannot run is reported, not fatal
            peers.append({"label": peer, "error": f"{type(e).__name__}: {e}"})
            log(f"  {peer}: FAILED: {e}")

    # The same load without LZ4 on the insert bodies (ClickHouse on this host).
    plain = run_spate(topic, "spate-compression-none", ["--compression", "none"])
    log(f"  --compression none: {plain['rows_per_s']:,.0f} rows/s, {plain['cpu_s_per_million']:.2f} CPU s/M, "
        f"server {fmt(plain['server_cpu_s_per_million'], '.2f')} CPU s/M")

    sweep = []
    for n in SWEEP:
        # A budget large enough that --batch-rows, not --batch-bytes, closes
        # the batches (spate caps a batch at a quarter of the budget per driver).
        extra = ["--batch-rows", str(n), "--batch-bytes", "256MiB", "--max-buffered-bytes", "1GiB"]
        r = run_spate(topic, f"batch-rows-{n}", extra)
        r["batch_rows"] = n
        sweep.append(r)
        log(f"  --batch-rows {n}: {r['rows_per_s']:,.0f} rows/s, {r['cpu_s_per_million']:.2f} CPU s/M")
    png = os.path.join(ROOT, "bench", "results", f"batch-rows-{date}.png")
    plotted = bool(sweep) and plot_batch_rows(sweep, png)

    # ---- the report
    server = ch("SELECT version()")
    md.append(f"# spate bench: e2e\n\n{date}, {os.cpu_count()} cores, ClickHouse {server}, nisshi broker; "
              f"{MESSAGES:,} small events (~{avg_bytes:.0f} B of JSON, 10 columns) on {PARTITIONS} partitions. "
              f"Medians of {REPEAT} alternated rounds (consume ceiling, spate, insert ceiling).\n")
    if micro_table:
        md.append("## Hot path per row (criterion, one core)\n")
        md.append("| benchmark | ns/row | MB/s of JSON |\n|---|---:|---:|")
        for name, ns, mbs in micro_table:
            md.append(f"| {name} | {fmt(ns, '.0f')} | {fmt(mbs, '.1f')} |")
        md.append("")
    md.append("## End to end\n")
    md.append("| run | steady rows/s | MB/s | CPU s / M rows | server CPU s / M rows | peak RSS MiB | wall s | inserts |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in consume:
        md.append(f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['rows_per_s'] * avg_bytes / 1e6:.0f} | "
                  f"{r['cpu_s_per_million']:.2f} | — | {r['peak_rss_mib']:.0f} | — | — |")
    for r in spate + per_batch + wide:
        md.append(f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['rows_per_s'] * avg_bytes / 1e6:.0f} | "
                  f"{r['cpu_s_per_million']:.2f} | {fmt(r['server_cpu_s_per_million'], '.2f')} | "
                  f"{r['peak_rss_mib']:.0f} | {r['wall_s']:.1f} | {r['inserts']} |")
    for r in insert:
        md.append(f"| {r['label']} (clickhouse-client) | {r['rows_per_s']:,.0f} | — | "
                  f"{r['client_cpu_s_per_million']:.2f} | {fmt(r['server_cpu_s_per_million'], '.2f')} | — | "
                  f"{r['wall_s']:.1f} | — |")
    md.append("")
    md.append(f"Lower ceiling: {'consume' if consume_rate <= insert_rate else 'insert'} "
              f"({ceiling:,.0f} rows/s); spate reaches **{fraction:.2f}** of it.\n")
    b_server = med(per_batch, "server_cpu_s_per_million")
    md.append("Streamed insert requests (default) against one request per batch (`--insert-request 0`), "
              f"medians of the alternated runs: rows/s {rate:,.0f} / {med(per_batch, 'rows_per_s'):,.0f} = "
              f"{rate / med(per_batch, 'rows_per_s'):.2f}; wall s {med(spate, 'wall_s'):.1f} / "
              f"{med(per_batch, 'wall_s'):.1f}; spate CPU s / M rows {cpu:.2f} / "
              f"{med(per_batch, 'cpu_s_per_million'):.2f}; server CPU s / M rows {fmt(server_cpu, '.2f')} / "
              f"{fmt(b_server, '.2f')}; parts {med(spate, 'inserts'):.0f} / {med(per_batch, 'inserts'):.0f}.\n")
    per_core = f"small events (~{avg_bytes:.0f} B, 10 columns) {1e6 / cpu:,.0f}"
    if wide:
        wide_cpu = med(wide, "cpu_s_per_million")
        per_core += (f"; wide events (~1 KB, 50 columns, {E2E_WIDE_MESSAGES:,} per run) {1e6 / wide_cpu:,.0f} "
                     f"({wide_cpu / cpu:.2f}x the small event's CPU per row)")
    md.append(f"Rows per spate core (its own CPU only, rows per CPU second): {per_core}.\n")
    if peers:
        md.append("## Peers, same topic, same run\n")
        md.append("| connector | steady rows/s | own CPU s / M rows | server CPU s / M rows | total CPU s / M rows |")
        md.append("|---|---:|---:|---:|---:|")
        total = cpu + (server_cpu or 0)
        md.append(f"| spate | {rate:,.0f} | {cpu:.2f} | {fmt(server_cpu, '.2f')} | {total:.2f} |")
        p_total = plain["cpu_s_per_million"] + (plain["server_cpu_s_per_million"] or 0)
        md.append(f"| spate --compression none | {plain['rows_per_s']:,.0f} | {plain['cpu_s_per_million']:.2f} | "
                  f"{fmt(plain['server_cpu_s_per_million'], '.2f')} | {p_total:.2f} |")
        for p in peers:
            if "error" in p:
                md.append(f"| {p['label']} | failed: {p['error']} | | | |")
            else:
                md.append(f"| {p['label']} | {p['rows_per_s']:,.0f} | — (in the server) | "
                          f"{p['server_cpu_s_per_million']:.2f} | {p['server_cpu_s_per_million']:.2f} |")
        md.append("")
    if sweep:
        plot = f"![throughput against --batch-rows]({os.path.basename(png)})\n" if plotted else ""
        md.append(f"## Throughput against --batch-rows\n\n{plot}")
        md.append("| --batch-rows | steady rows/s | CPU s / M rows | server CPU s / M rows | peak RSS MiB | inserts |")
        md.append("|---:|---:|---:|---:|---:|---:|")
        for r in sweep:
            md.append(f"| {r['batch_rows']:,} | {r['rows_per_s']:,.0f} | {r['cpu_s_per_million']:.2f} | "
                      f"{fmt(r['server_cpu_s_per_million'], '.2f')} | {r['peak_rss_mib']:.0f} | {r['inserts']} |")
        md.append("\n(with `--batch-bytes 256MiB --max-buffered-bytes 1GiB`, so that rows close the batches)\n")

    # ---- the targets
    targets = issue20_targets(cpu, server_cpu, rate, ceiling, rss, consume, insert, peers)
    earlier = []
    small = [ns for name, ns, _ in micro_table if ns is not None and name.startswith("small")]
    if small:
        worst = max(small)
        earlier.append((f"hot path ≤ 1000 ns per small row: {worst:.0f} ns (slowest small benchmark)", worst <= 1000))
    earlier.append((f"spate CPU ≤ 1.5 s per million rows: {cpu:.2f}", cpu <= 1.5))
    for p in peers:
        if "error" not in p and server_cpu is not None:
            total = cpu + server_cpu
            earlier.append((f"spate + server CPU per million rows below {p['label']}'s: "
                            f"{total:.2f} < {p['server_cpu_s_per_million']:.2f}",
                            total < p["server_cpu_s_per_million"]))
    md.append("## Targets (issues 20 and 33: ratios to figures of this run)\n")
    md.append("| target | measured | limit | |\n|---|---:|---:|---|")
    for t in targets:
        md.append(f"| {t['text']} | {fmt(t['value'], '.2f')} | {t['op']} {t['limit']:g} | "
                  f"{'met' if t['met'] else '**missed**'} |")
    md.append("\nEarlier absolute targets (absolute CPU differs between machines of this kind):\n")
    for text, ok in earlier:
        md.append(f"- {'met' if ok else '**missed**'}: {text}")
    summary = (f"bench: rows_per_s={rate:.0f} cpu_s_per_million={cpu:.3f} "
               f"fraction_of_ceiling={fraction:.3f} peak_rss_mib={rss:.0f}")
    md.append(f"\n`{summary}`\n")
    return "\n".join(md), summary, targets


def issue20_targets(cpu, server_cpu, rate, ceiling, rss, consume, insert, peers):
    """Issue 20's targets as issue 33 tightened them, each a ratio of two
    medians of this run (absolute CPU seconds differ 1.3-1.8x between two
    machines of this kind): a list of {name, text, value, op, limit, met};
    value None = not measured. The Kafka engine is counted per message,
    not per row written (its rate includes its duplicates)."""
    def med(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    def ratio(a, b):
        return a / b if a is not None and b else None

    def target(name, text, value, op, limit):
        met = value is not None and (value <= limit if op == "≤" else value >= limit)
        return {"name": name, "text": text, "value": value, "op": op, "limit": limit, "met": met}

    engine = next((p for p in peers if p.get("label", "").startswith("kafka-engine") and "error" not in p), None)
    engine_rate = None
    if engine and engine.get("rows_per_s") and engine.get("rows"):
        engine_rate = engine["rows_per_s"] * min(1.0, MESSAGES / engine["rows"])
    return [
        target("spate_cpu_per_row_vs_consume_ceiling",
               "spate CPU per row / bare consume ceiling's CPU per row",
               ratio(cpu, med(consume, "cpu_s_per_million")), "≤", 1.3),
        target("server_cpu_per_spate_row_vs_insert_ceiling",
               "server CPU per spate row / insert ceiling's server CPU per row",
               ratio(server_cpu, med(insert, "server_cpu_s_per_million")), "≤", 1.15),
        target("rows_per_s_vs_kafka_engine",
               "spate rows/s / Kafka engine messages/s",
               ratio(rate, engine_rate), "≥", 1.5),
        target("rows_per_s_vs_lower_ceiling",
               "spate rows/s / lower ceiling rows/s",
               ratio(rate, ceiling), "≥", 0.9),
        target("peak_rss_vs_budget",
               f"peak RSS MiB / (--max-buffered-bytes + 64 MiB = {DEFAULT_BUDGET_MIB + 64} MiB)",
               ratio(rss, DEFAULT_BUDGET_MIB + 64), "≤", 1.0),
    ]


def target_lines(targets):
    """One line per target, for the end of the bench's output."""
    ascii_op = {"≤": "<=", "≥": ">="}
    return [f"bench: target {t['name']} ratio={'none' if t['value'] is None else format(t['value'], '.3f')} "
            f"limit={ascii_op[t['op']]}{t['limit']:g} {'met' if t['met'] else 'missed'}" for t in targets]


def table_md(results):
    out = ["| run | steady rows/s | wall s | CPU s / M rows | peak RSS MiB | flags |",
           "|---|---:|---:|---:|---:|---|"]
    for r in results:
        out.append(f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['wall_s']:.1f} | "
                   f"{r['cpu_s_per_million']:.2f} | {r['peak_rss_mib']:.0f} | `{r['args']}` |")
    return "\n".join(out)


def suite_backpressure(topic, date):
    configs = [
        ("budget-default", ["--max-buffered-bytes", "256MiB"]),
        ("budget-huge", ["--max-buffered-bytes", "16GiB"]),
    ]
    results = []
    # Alternate the two configurations so drift on a shared machine hits both.
    for i in range(REPEAT):
        for label, extra in configs:
            r = run_spate(topic, f"{label}-{i}", extra)
            log(f"  {r['label']}: {r['rows_per_s']:,.0f} rows/s steady, {r['cpu_s_per_million']:.2f} CPU s/M")
            results.append(r)

    def median(label, key):
        return statistics.median(r[key] for r in results if r["label"].startswith(label))
    rate = {label: median(label, "rows_per_s") for label, _ in configs}
    cpu = {label: median(label, "cpu_s_per_million") for label, _ in configs}
    ratio = rate["budget-default"] / rate["budget-huge"]
    cpu_ratio = cpu["budget-default"] / cpu["budget-huge"]
    summary = (f"bench backpressure: ratio={ratio:.3f} cpu_ratio={cpu_ratio:.3f} "
               f"default_rows_per_s={rate['budget-default']:.0f} huge_rows_per_s={rate['budget-huge']:.0f}")
    server = ch("SELECT version()")
    md = (f"# spate bench: backpressure\n\n{date}, {os.cpu_count()} cores, ClickHouse {server}, "
          f"{MESSAGES} events on {PARTITIONS} partitions, {REPEAT} runs per configuration "
          f"(alternated; ratios of each configuration's median steady rows/s and median CPU s per million rows)."
          f"\n\n{table_md(results)}\n\n`{summary}`\n")
    return md, summary, []


def suite_delivery(topic, date):
    """Exactly-once against at-least-once, streamed (the default) and with
    one request per batch: exactly-once keeps one request per block (its
    tokens and intents name one block each), so since at-least-once
    streams (issue 33) its cost is measured against both."""
    configs = [
        ("at-least-once", []),
        ("at-least-once-per-batch", ["--insert-request", "0"]),
        ("exactly-once", ["--delivery", "exactly-once"]),
    ]
    results = []
    for i in range(REPEAT):
        for label, extra in configs:
            r = run_spate(topic, f"{label}-{i}", extra, replicated=True, schema=SMALL_COORDINATES)
            log(f"  {r['label']}: {r['rows_per_s']:,.0f} rows/s steady, {r['cpu_s_per_million']:.2f} CPU s/M, "
                f"server {fmt(r['server_cpu_s_per_million'], '.2f')} CPU s/M, {r['inserts']} parts, "
                f"{r['duplicates']} duplicates")
            results.append(r)

    def median(label, key):
        vals = [r[key] for r in results
                if r["label"].rsplit("-", 1)[0] == label and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    keys = ("rows_per_s", "cpu_s_per_million", "server_cpu_s_per_million", "inserts")
    m = {label: {k: median(label, k) for k in keys} for label, _ in configs}

    def ratio(label, base, key):
        a, b = m[label][key], m[base][key]
        return a / b if a is not None and b else None

    eo, alo, pb = "exactly-once", "at-least-once", "at-least-once-per-batch"
    ratio_rate, ratio_cpu = ratio(eo, alo, "rows_per_s"), ratio(eo, alo, "cpu_s_per_million")
    summary = (f"bench delivery: rows_per_s_ratio={ratio_rate:.3f} cpu_ratio={ratio_cpu:.3f} "
               f"server_cpu_ratio={fmt(ratio(eo, alo, 'server_cpu_s_per_million'), '.3f')} "
               f"rows_per_s_ratio_vs_per_batch={ratio(eo, pb, 'rows_per_s'):.3f} "
               f"exactly_once_rows_per_s={m[eo]['rows_per_s']:.0f} "
               f"at_least_once_rows_per_s={m[alo]['rows_per_s']:.0f}")
    server = ch("SELECT version()")
    lines = ["| exactly-once against | rows/s | spate CPU / row | server CPU / row | parts |",
             "|---|---:|---:|---:|---:|"]
    for base in (alo, pb):
        lines.append(f"| {base} | {fmt(ratio(eo, base, 'rows_per_s'), '.2f')} | "
                     f"{fmt(ratio(eo, base, 'cpu_s_per_million'), '.2f')} | "
                     f"{fmt(ratio(eo, base, 'server_cpu_s_per_million'), '.2f')} | "
                     f"{fmt(ratio(eo, base, 'inserts'), '.2f')} |")
    md = (f"# spate bench: delivery\n\n{date}, {os.cpu_count()} cores, ClickHouse {server}, "
          f"{MESSAGES} events on {PARTITIONS} partitions, ReplicatedMergeTree, {REPEAT} runs per mode "
          f"(alternated; ratios of each mode's medians; exactly-once cuts one partition per block, records an "
          f"intent per block and sends one request per block; at-least-once streams its batches into one "
          f"request per shard unless `--insert-request 0`)."
          f"\n\n{table_md(results)}\n\n" + "\n".join(lines) + f"\n\n`{summary}`\n")
    return md, summary, []


FORMATS = ("json", "avro", "protobuf")


def start_registry():
    """scripts/schema_registry.py on a free port, answering; (process, URL)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    registry = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "schema_registry.py"),
                                 "--port", str(port)], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/subjects/none/versions/1", timeout=1)
        except urllib.error.HTTPError:
            return registry, url
        except OSError:
            time.sleep(0.05)
    registry.terminate()
    sys.exit(f"bench: the schema registry did not answer on {url}")


def format_batch_flags():
    """The same --batch-rows for every format: the default, or for a small
    BENCH_MESSAGES a twentieth of it, so that the steady rate (sampled from
    the inserted parts) sees more than a couple of inserts."""
    return [] if MESSAGES >= 2_000_000 else ["--batch-rows", str(max(MESSAGES // 20, 1000))]


def format_runs(topic, url):
    """Preload the binary topics, then alternate the formats REPEAT times."""
    topics = {"json": topic}
    flags = {"json": format_batch_flags()}
    for name in FORMATS[1:]:
        topics[name] = f"{topic}_{name}"
        registry = ["--format", name, "--schema-registry", url]
        flags[name] = registry + format_batch_flags()
        subprocess.run(
            [SPATE, "gen", "--brokers", BROKERS, "--topic", topics[name], "--count", str(MESSAGES),
             "--partitions", str(PARTITIONS), "--schema", "small"] + registry,
            check=True, stderr=subprocess.DEVNULL, timeout=RUN_TIMEOUT,
        )
    runs = {name: [] for name in FORMATS}
    for i in range(REPEAT):
        for name in FORMATS:
            runs[name].append(run_spate(topics[name], f"fmt-{name}-{i}", flags[name]))
        log(f"  round {i}: " + ", ".join(f"{n} {runs[n][-1]['rows_per_s']:,.0f}/s" for n in FORMATS))
    return runs


def suite_formats(topic, date):
    """JSON, Avro and Protobuf on the same events, alternated, in one run."""
    registry, url = start_registry()
    try:
        runs = format_runs(topic, url)
    finally:
        registry.terminate()
        registry.wait(timeout=10)
    med = {n: {k: statistics.median(r[k] for r in runs[n]) for k in ("rows_per_s", "cpu_s_per_million")}
           for n in FORMATS}
    md = [f"# spate bench: formats\n\n{date}, {os.cpu_count()} cores, ClickHouse {ch('SELECT version()')}; "
          f"{MESSAGES:,} small events per format on {PARTITIONS} partitions, medians of {REPEAT} "
          f"alternated rounds, flags `{' '.join(format_batch_flags()) or '(defaults)'}` for every format. "
          "Ratios are to JSON (rows/s: above 1 is faster; CPU: below 1 is cheaper). CPU is the whole "
          "process's, start-up included.\n",
          "| format | rows/s | CPU s per million rows | peak RSS MiB | rows/s vs JSON | CPU vs JSON |\n"
          "|---|---:|---:|---:|---:|---:|"]
    ratios = {}
    for name in FORMATS:
        m = med[name]
        ratios[name] = (m["rows_per_s"] / med["json"]["rows_per_s"],
                        m["cpu_s_per_million"] / med["json"]["cpu_s_per_million"])
        md.append(f"| {name} | {m['rows_per_s']:,.0f} | {m['cpu_s_per_million']:.2f} | "
                  f"{max(r['peak_rss_mib'] for r in runs[name]):.0f} | "
                  f"{ratios[name][0]:.2f} | {ratios[name][1]:.2f} |")
    summary = ("bench: formats " + " ".join(f"{n}_rows_per_s={med[n]['rows_per_s']:.0f}" for n in FORMATS)
               + "".join(f" {n}_rate_ratio={ratios[n][0]:.2f}" for n in FORMATS[1:])
               + "".join(f" {n}_cpu_ratio={ratios[n][1]:.2f}" for n in FORMATS[1:]))
    return "\n".join(md) + "\n", summary, []


SCALING_PARTITIONS = [int(x) for x in os.environ.get("BENCH_SCALING_PARTITIONS", "8,64,256").split(",") if x]
SCALING_MESSAGES = int(os.environ.get("BENCH_SCALING_MESSAGES", "2000000"))
# A wide event is ~1 KB of JSON against ~200 B, and costs spate and the
# server about 4-5x per row: a quarter of the rows keeps a wide run about
# as long as a small one.
SCALING_WIDE_MESSAGES = int(os.environ.get("BENCH_SCALING_WIDE_MESSAGES", str(max(SCALING_MESSAGES // 4, 1))))


def cluster_servers():
    """One shard (cluster node a) and two shards (nodes a and b, cluster
    spate_two_shards, as `spate run --cluster` reads it from node a): the
    same servers for both, so the ratio is the shards' and not the
    servers'. The nodes' PID files sit next to the bench server's."""
    urls = [u for u in os.environ.get("SPATE_TEST_CLUSTER_URLS", "").split(",") if u]
    nodes = [n for n in os.environ.get("SPATE_TEST_CLUSTER_NODES", "").split(",") if n]
    if len(urls) < 2 or len(nodes) != len(urls) or not CH_PID_FILE:
        sys.exit("bench: scaling needs cluster nodes a and b (SPATE_TEST_CLUSTER_URLS/NODES, "
                 "SPATE_TEST_CLICKHOUSE_PID_FILE): eval \"$(scripts/services.sh env)\"")
    pids = [os.path.join(os.path.dirname(CH_PID_FILE), f"clickhouse-{n}.pid") for n in nodes]
    one = Servers("1 shard", urls[:1], pids[:1], ["--clickhouse-url", urls[0]])
    two = Servers("2 shards", urls[:2], pids[:2],
                  ["--clickhouse-url", urls[0], "--cluster", "spate_two_shards"], cluster="spate_two_shards")
    return [(1, one), (2, two)]


def prefetch_per_partition(log_text):
    """The librdkafka prefetch per partition spate set, from its log line
    (`prefetch budget split over the subscribed topics' partitions`)."""
    import re
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log_text or "")  # the text log's colours
    m = re.search(r"prefetch_per_partition=(\d+)", plain)
    return int(m.group(1)) if m else None


def suite_scaling(_topic, date):
    """Issue 20's "cost as the work grows": partitions x event width x
    shards, one run each, with default flags. One topic per (schema,
    partitions) serves both shard counts (the same data for the 1-vs-2
    ratio, half the preloads on an in-memory broker)."""
    shard_sets = cluster_servers()
    results = []
    for schema, messages in ((SMALL, SCALING_MESSAGES), (WIDE, SCALING_WIDE_MESSAGES)):
        for partitions in SCALING_PARTITIONS:
            topic = f"bench_scaling_{schema.name}_{partitions}p_{int(time.time() * 1000)}"
            secs = preload(topic, messages, partitions, schema)
            log(f"  preloaded {messages:,} {schema.name} events on {partitions} partitions in {secs:.1f}s")
            for shards, servers in shard_sets:
                label = f"scaling-{schema.name}-{partitions}p-{shards}s"
                # info from the Kafka source only: its prefetch line.
                r = run_spate(topic, label, [], servers=servers, schema=schema, messages=messages,
                              log_level="warn,spate_kafka=info")
                r.update(schema=schema.name, partitions=partitions, shards=shards, messages=messages,
                         prefetch_per_partition=prefetch_per_partition(r.pop("log")))
                r["rows_per_insert"] = r["rows"] / max(r["inserts"], 1)
                r["inserts_per_s_per_shard"] = r["inserts"] / max(r["insert_s"], 1e-3) / shards
                results.append(r)
                log(f"  {label}: {r['rows_per_s']:,.0f} rows/s, {r['cpu_s_per_million']:.2f} CPU s/M, "
                    f"server {fmt(r['server_cpu_s_per_million'], '.2f')} CPU s/M, {r['peak_rss_mib']:.0f} MiB, "
                    f"{r['inserts']} inserts ({r['rows_per_insert']:,.0f} rows each), "
                    f"prefetch {fmt(r['prefetch_per_partition'])} B/partition")
            drop_tables()
    return scaling_report(results, date)


def scaling_ratios(results):
    """The growth of each figure, as medians of ratios between runs that
    differ in one dimension only: {name: ratio}."""
    by = {(r["schema"], r["partitions"], r["shards"]): r for r in results}
    lo, hi = min(SCALING_PARTITIONS), max(SCALING_PARTITIONS)

    def med(pairs, key):
        vals = [by[b][key] / by[a][key] for a, b in pairs
                if a in by and b in by and by[a].get(key) and by[b].get(key) is not None]
        return statistics.median(vals) if vals else None
    parts = [((s, lo, n), (s, hi, n)) for s in ("small", "wide") for n in (1, 2)]
    shards = [((s, p, 1), (s, p, 2)) for s in ("small", "wide") for p in SCALING_PARTITIONS]
    wide = [(("small", p, n), ("wide", p, n)) for p in SCALING_PARTITIONS for n in (1, 2)]
    out = {}
    for key, short in (("rows_per_s", "rows_per_s"), ("cpu_s_per_million", "cpu"),
                       ("server_cpu_s_per_million", "server_cpu"), ("peak_rss_mib", "rss"),
                       ("rows_per_insert", "rows_per_insert")):
        out[f"{short}_{hi}p_vs_{lo}p"] = med(parts, key)
        out[f"{short}_2_shards_vs_1"] = med(shards, key)
        out[f"{short}_wide_vs_small"] = med(wide, key)
    return out


def scaling_report(results, date):
    ratios = scaling_ratios(results)
    md = [f"# spate bench: scaling\n\n{date}, {os.cpu_count()} cores (shared with other builds and benches: "
          f"absolute figures are noisy, compare within this run), ClickHouse {ch('SELECT version()')} "
          f"(cluster nodes a and b), nisshi broker (in memory). {SCALING_MESSAGES:,} small events "
          f"(10 columns, ~200 B) or {SCALING_WIDE_MESSAGES:,} wide events (50 columns, ~1 KB) per topic; "
          "one run per configuration, `spate run --until-end` with default flags; one shard is "
          "`--clickhouse-url` node a, two shards `--cluster spate_two_shards` (nodes a and b). "
          "Server CPU is the sum over the shards' servers. Every run checked count() = "
          "uniqExact(event key) = events.\n",
          "| events | partitions | shards | steady rows/s | spate CPU s / M rows | server CPU s / M rows | "
          "peak RSS MiB | inserts | rows / insert | inserts / s / shard | prefetch / partition KiB | wall s |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        pf = r["prefetch_per_partition"]
        md.append(f"| {r['schema']} | {r['partitions']} | {r['shards']} | {r['rows_per_s']:,.0f} | "
                  f"{r['cpu_s_per_million']:.2f} | {fmt(r['server_cpu_s_per_million'], '.2f')} | "
                  f"{r['peak_rss_mib']:.0f} | {r['inserts']} | {r['rows_per_insert']:,.0f} | "
                  f"{r['inserts_per_s_per_shard']:.2f} | {fmt(pf / 1024 if pf else None)} | {r['wall_s']:.1f} |")
    md.append("\nGrowth, each the median of the ratios between runs that differ in that dimension only:\n")
    md.append("| figure | " + f"{max(SCALING_PARTITIONS)} / {min(SCALING_PARTITIONS)} partitions | "
              "2 shards / 1 | wide / small |\n|---|---:|---:|---:|")
    for short, name in (("rows_per_s", "steady rows/s"), ("cpu", "spate CPU per row"),
                        ("server_cpu", "server CPU per row"), ("rss", "peak RSS"),
                        ("rows_per_insert", "rows per insert")):
        cells = [ratios[f"{short}_{max(SCALING_PARTITIONS)}p_vs_{min(SCALING_PARTITIONS)}p"],
                 ratios[f"{short}_2_shards_vs_1"], ratios[f"{short}_wide_vs_small"]]
        md.append(f"| {name} | " + " | ".join(fmt(c, ".2f") for c in cells) + " |")
    hi, lo = max(SCALING_PARTITIONS), min(SCALING_PARTITIONS)

    def ratio_field(name):
        v = ratios[name]
        return "none" if v is None else f"{v:.3f}"
    summary = (f"bench: scaling configs={len(results)} "
               f"rows_per_s_min={min(r['rows_per_s'] for r in results):.0f} "
               f"rows_per_s_max={max(r['rows_per_s'] for r in results):.0f} "
               f"rows_per_s_{hi}p_vs_{lo}p={ratio_field(f'rows_per_s_{hi}p_vs_{lo}p')} "
               f"rows_per_s_2_shards_vs_1={ratio_field('rows_per_s_2_shards_vs_1')} "
               f"cpu_wide_vs_small={ratio_field('cpu_wide_vs_small')} "
               f"server_cpu_2_shards_vs_1={ratio_field('server_cpu_2_shards_vs_1')} "
               f"peak_rss_mib_max={max(r['peak_rss_mib'] for r in results):.0f}")
    md.append(f"\n`{summary}`\n")
    return "\n".join(md), summary, []


# The e2e suite's checked targets (issue20_targets), printed at the end.
TARGETS = []

# Suites that preload topics of their own (the shared one is not made for them).
OWN_TOPICS = {"scaling"}

SUITES = {"e2e": None, "backpressure": None, "delivery": None, "formats": None, "scaling": None}


def main():
    suites = os.environ.get("BENCH_SUITE", "e2e,formats,delivery").split(",")
    for s in suites:
        if s not in SUITES:
            sys.exit(f"bench: unknown suite {s} ({', '.join(SUITES)})")
    # The consume ceiling only for the e2e suite (the others compare spate with itself).
    for exe in (SPATE, CONSUME_CEILING) if "e2e" in suites else (SPATE,):
        if not os.access(exe, os.X_OK):
            sys.exit(f"bench: {exe} is missing; run `make bench` (it builds it)")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    topic = None
    # The shared topic, unless only suites that preload their own run.
    if any(s not in OWN_TOPICS for s in suites):
        topic = f"bench_{int(time.time())}"
        log(f"bench: preloading {MESSAGES:,} events into {topic} ({PARTITIONS} partitions)")
        secs = preload(topic)
        log(f"bench: preloaded in {secs:.1f}s")
    # The Kafka engine's server is stopped at the end unless it was up before.
    engine_sh = os.path.join(ROOT, "scripts", "kafka-engine.sh")
    engine_was_up = subprocess.run([engine_sh, "status"], capture_output=True).returncode == 0
    summaries = {}
    try:
        summaries = run_suites(suites, topic, date)
    finally:
        if "e2e" in suites and "kafka-engine" in PEERS and not engine_was_up:
            subprocess.run([engine_sh, "down"], capture_output=True, timeout=120)
    # Every suite's summary line; e2e's fixed-form line last, for tools
    # that track it over time.
    # Issue 20's targets, one line each, just above the summary lines.
    for line in target_lines(TARGETS):
        print(line, flush=True)
    for suite in sorted(summaries, key=lambda s: s == "e2e"):
        print(summaries[suite], flush=True)


def run_suites(suites, topic, date):
    """Run each suite; its summary line by suite."""
    summaries = {}
    for suite in suites:
        log(f"bench: suite {suite}")
        try:
            md, summary, checks = {"e2e": suite_e2e, "backpressure": suite_backpressure,
                                   "delivery": suite_delivery, "formats": suite_formats,
                                   "scaling": suite_scaling}[suite](topic, date)
        finally:
            drop_tables()
        path = os.path.join(ROOT, "bench", "results", f"{suite}-{date}.md")
        with open(path, "w") as f:
            f.write(md)
        print()
        print(md)
        log(f"bench: wrote {os.path.relpath(path, ROOT)}")
        summaries[suite] = summary
        if suite == "e2e":
            TARGETS.extend(checks)
    return summaries


if __name__ == "__main__":
    main()
