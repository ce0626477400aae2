#!/usr/bin/env python3
"""perf record of one spate run --until-end of BENCH_MESSAGES small events (default flags) into
PERF_OUT. Run after scripts/services.sh up and eval "$(scripts/services.sh env)"."""
import os, sys, time, subprocess
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench
topic = f"perf_spate_{int(time.time())}"
bench.preload(topic)
table = bench.fresh_table("perf_spate")
args = [bench.SPATE, "run", "--brokers", bench.BROKERS, "--topic", topic, "--group", f"perf_{time.time_ns()}",
        "--clickhouse-url", bench.CH, "--table", table, "--until-end", "-X", "session.timeout.ms=6000", "--log-level", "warn"]
subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "999", "-o", os.environ["PERF_OUT"], "--"] + args, check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
print("rows", bench.ch(f"SELECT count() FROM {table}"))
bench.drop_tables()
