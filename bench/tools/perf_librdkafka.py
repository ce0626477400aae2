#!/usr/bin/env python3
"""What librdkafka costs per row in spate, against the bare consume ceiling.

    eval "$(scripts/services.sh env)"
    BENCH_MESSAGES=2000000 build/bench-venv/bin/python bench/tools/perf_librdkafka.py

Preloads one topic, then `perf record -e cpu-clock -F 999` of one
`spate run --until-end` (SPATE_BIN, default target/release/spate) and of
`examples/consume_ceiling` on it. Each profile's samples are split into
librdkafka's own threads (`rdk:*`: fetching, parsing the fetch responses,
the kernel's receive), librdkafka's functions (`rd_*`) called on the
threads that consume (spate's drivers; the ceiling's main thread), and
the rest, and printed as CPU seconds per million rows (a sample is
1/999 s), with the heaviest symbols of librdkafka's threads.
"""
import collections, os, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench

HZ = 999
topic = f"perf_rdk_{int(time.time())}"
bench.preload(topic)
rows = bench.MESSAGES / 1e6
tmp = tempfile.mkdtemp(prefix="perf_rdk.")


def split(data):
    """Samples by (part, symbol) of one perf.data."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    parts = collections.Counter()
    syms = collections.Counter()
    for line in out.splitlines():
        f = line.split(None, 2)  # comm, ip, symbol (may hold spaces)
        if not f:
            continue
        comm = f[0]
        sym = f[2].strip() if len(f) > 2 else "?"
        if comm.startswith("rdk:"):
            part = "librdkafka threads" if comm.startswith("rdk:broker") else "librdkafka main thread"
            syms[sym] += 1
        elif sym.startswith("rd_"):
            part = "librdkafka functions on the consuming threads"
        else:
            part = "the rest"
        parts[part] += 1
    return parts, syms


def report(name, data):
    parts, syms = split(data)
    total = sum(parts.values())
    print(f"{name}: {total / HZ / rows:.3f} CPU s per million rows in all ({total} samples)")
    for part in ("librdkafka threads", "librdkafka main thread",
                 "librdkafka functions on the consuming threads", "the rest"):
        n = parts.get(part, 0)
        print(f"  {part}: {n / HZ / rows:.3f} s per million ({100 * n / max(total, 1):.1f}%)")
    broker = sum(syms.values())
    for sym, n in syms.most_common(12):
        print(f"    rdk {sym}: {100 * n / max(broker, 1):.1f}% of librdkafka's threads")


perf = lambda out: ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(HZ), "-o", out, "--"]
spate_data = os.path.join(tmp, "spate.data")
out = bench.run_spate(topic, "perf-rdk-spate", [], wrap=perf(spate_data))
print(f"spate: {out['rows']} rows, {out['rows_per_s']:.0f} rows/s under perf")
ceiling_data = os.path.join(tmp, "ceiling.data")
subprocess.run(perf(ceiling_data) + [bench.CONSUME_CEILING, bench.BROKERS, topic],
               check=True, stdout=subprocess.DEVNULL, timeout=bench.RUN_TIMEOUT)
report("spate", spate_data)
report("consume ceiling", ceiling_data)
bench.drop_tables()
