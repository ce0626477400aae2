#!/usr/bin/env python3
"""A/B of glibc malloc settings for spate run: page faults, CPU, RSS, rate."""
import os, sys, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench

VARIANTS = {
    "default": {},
    "mmap4m": {"MALLOC_MMAP_THRESHOLD_": str(4 << 20)},
    "mmap128k_trim64m": {"MALLOC_MMAP_THRESHOLD_": str(128 << 10), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)},
    "mmap4m_trim64m": {"MALLOC_MMAP_THRESHOLD_": str(4 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)},
}
names = [v for v in os.environ.get("AB_VARIANTS", ",".join(VARIANTS)).split(",") if v]
rounds = int(os.environ.get("AB_ROUNDS", "2"))
topic = f"ab_malloc_{int(time.time())}"
bench.preload(topic)
res = {n: [] for n in names}
for r in range(rounds):
    for n in names:
        for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
            os.environ.pop(k, None)
        os.environ.update(VARIANTS[n])
        label = f"ab-{n.replace('_','-')}-{r}"
        out = bench.run_spate(topic, label, [])
        res[n].append(out)
        print(f"{label}: rows/s={out['rows_per_s']:.0f} cpu/M={out['cpu_s_per_million']:.2f} sys/M={out['sys_cpu_s_per_million']:.2f} "
              f"faults/row={out['minor_faults_per_row']:.4f} rss={out['peak_rss_mib']:.0f} server/M={out['server_cpu_s_per_million']:.2f}", flush=True)
for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
    os.environ.pop(k, None)
print("median:")
for n in names:
    m = lambda key: statistics.median(x[key] for x in res[n])
    print(f"{n}: rows/s={m('rows_per_s'):.0f} cpu/M={m('cpu_s_per_million'):.2f} sys/M={m('sys_cpu_s_per_million'):.2f} "
          f"faults/row={m('minor_faults_per_row'):.4f} peak_rss_max={max(x['peak_rss_mib'] for x in res[n]):.0f}")
bench.drop_tables()
