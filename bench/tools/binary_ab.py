#!/usr/bin/env python3
"""A/B of two spate binaries on one topic, alternated: page faults, CPU, RSS, rate.

    AB_BASE=/tmp/spate-base AB_NEW=target/release/spate AB_ROUNDS=3 \
        build/bench-venv/bin/python bench/tools/binary_ab.py

Each round runs both binaries on the same preloaded topic (BENCH_MESSAGES
events, the small event unless AB_SCHEMA=wide), into fresh tables, in turn;
the report gives every run and the medians. Extra spate flags: AB_FLAGS;
environment of the new binary's runs only: AB_ENV_NEW="K=V K2=V2".
"""
import os, sys, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench

bins = {"base": os.environ["AB_BASE"], "new": os.environ.get("AB_NEW", bench.SPATE)}
rounds = int(os.environ.get("AB_ROUNDS", "2"))
flags = os.environ.get("AB_FLAGS", "").split()
env_new = dict(kv.split("=", 1) for kv in os.environ.get("AB_ENV_NEW", "").split())
schema = bench.WIDE if os.environ.get("AB_SCHEMA") == "wide" else bench.SMALL
topic = f"ab_bin_{int(time.time())}"
bench.preload(topic, schema=schema)
keys = ("rows_per_s", "cpu_s_per_million", "sys_cpu_s_per_million", "minor_faults_per_row",
        "peak_rss_mib", "server_cpu_s_per_million", "inserts", "wall_s", "insert_s")
res = {n: [] for n in bins}
for r in range(rounds):
    order = list(bins) if r % 2 == 0 else list(reversed(bins))
    for n in order:
        bench.SPATE = bins[n]
        saved = {k: os.environ.get(k) for k in env_new}
        if n == "new":
            os.environ.update(env_new)
        out = bench.run_spate(topic, f"ab-{n}-{r}", flags, schema=schema)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        res[n].append(out)
        print(f"{n} round {r}: " + " ".join(f"{k}={out[k]:.4g}" for k in keys), flush=True)
print("median (peak_rss: max):")
for n in bins:
    med = {k: statistics.median(x[k] for x in res[n]) for k in keys}
    med["peak_rss_mib"] = max(x["peak_rss_mib"] for x in res[n])
    print(f"{n}: " + " ".join(f"{k}={med[k]:.4g}" for k in keys))
b = {k: statistics.median(x[k] for x in res["base"]) for k in keys}
w = {k: statistics.median(x[k] for x in res["new"]) for k in keys}
print("new/base: " + " ".join(f"{k}={w[k] / b[k]:.3f}" for k in keys if b[k]))
bench.drop_tables()
