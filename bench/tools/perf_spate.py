#!/usr/bin/env python3
"""perf record of one spate run --until-end of BENCH_MESSAGES small events (default flags) into
PERF_OUT. Run after scripts/services.sh up and eval "$(scripts/services.sh env)"."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench
topic = f"perf_spate_{int(time.time())}"
bench.preload(topic)
perf = ["perf", "record", "-e", "cpu-clock", "-F", "999", "-o", os.environ["PERF_OUT"], "--"]
out = bench.run_spate(topic, "perf-spate", [], wrap=perf)
print(f"rows {out['rows']}, {out['rows_per_s']:.0f} rows/s under perf")
bench.drop_tables()
