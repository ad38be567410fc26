"""Times trace generation for GPT-3 175B (tp=8, pp=8) as the GPU count grows.

Run: python bench/bench_trace_gen.py [--gpus 1024 ... 16384] [--repeat 3] [--validate-upto 0]
Two sweeps, side by side in one run: the published global batch (1536 sequences, so the
micro-batches per replica shrink as dp grows and the op count stays about flat), and a fixed
8 micro-batches per replica (work per GPU fixed, so ops grow with the GPU count). Per row: the
best of --repeat generation times, ops, distinct op objects, time per op, and time against the
sweep's first row. The target from issue 3 is 1024 GPUs in under 2 s on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from traffic.workload import build_workload  # noqa: E402

TARGET_S = 2.0


def run(gpus: int, repeat: int, validate: bool, microbatches: int | None):
    spec = {"model": "gpt3-175b", "tp": 8, "pp": 8}  # dp = gpus / 64
    if microbatches:
        spec["microbatches"] = microbatches
    best = float("inf")
    trace = None
    for _ in range(repeat):
        trace = None  # free the previous one before timing the next
        t0 = time.perf_counter()
        trace = build_workload(spec, gpus, validate=False)
        best = min(best, time.perf_counter() - t0)
    ops = sum(len(v) for v in trace.ops.values())
    unique = len({id(o) for v in trace.ops.values() for o in v})
    row = {"gpus": gpus, "dp": trace.meta["dp"], "microbatches": trace.meta["microbatches"], "gen_s": best,
           "ops": ops, "unique_ops": unique}
    if validate:
        t0 = time.perf_counter()
        trace.validate()
        row["validate_s"] = time.perf_counter() - t0
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--validate-upto", type=int, default=0,
                    help="also time the full cross-rank validate() for GPU counts up to this")
    args = ap.parse_args(argv)
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]} model=gpt3-175b tp=8 pp=8")
    for title, mb in (("published global batch 1536", None), ("fixed 8 micro-batches per replica", 8)):
        print(f"\n{title}")
        print(f"{'gpus':>6} {'dp':>4} {'mb':>4} {'gen_s':>8} {'ops':>10} {'distinct':>9} {'us/op':>7} "
              f"{'gen/first':>9} {'validate_s':>10}")
        first = None
        for g in args.gpus:
            row = run(g, args.repeat, g <= args.validate_upto and mb is None, mb)
            first = first or row
            per_op = row["gen_s"] / row["ops"] * 1e6
            print(f"{row['gpus']:>6} {row['dp']:>4} {row['microbatches']:>4} {row['gen_s']:>8.3f} {row['ops']:>10} "
                  f"{row['unique_ops']:>9} {per_op:>7.3f} {row['gen_s'] / first['gen_s']:>8.2f}x"
                  f" {row.get('validate_s', float('nan')):>10.2f}")
            if g == 1024 and mb is None:
                verdict = "meets" if row["gen_s"] < TARGET_S else "MISSES"
                print(f"       1024 GPUs: {row['gen_s']:.3f} s {verdict} the {TARGET_S:.0f} s target")


if __name__ == "__main__":
    main()
