"""A sweep from Python: all-reduce bus bandwidth against message size, ring against
halving-doubling, on 4 GPUs of a fat-tree, then a chart of it.

    sudo .venv/bin/python examples/sweep_from_python.py              # runs every point (root)
    .venv/bin/python examples/sweep_from_python.py --check           # plans every point, no root

Written in cells (# %%) to be stepped through in an editor that runs them, or run whole.
The run folder is results/sweep-from-python/ (--out DIR for another): one run per point
under points/, sweep.csv, and busbw.png drawn here from the runs' tables.
"""
# %% Imports and where the results go
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import dtnet  # noqa: E402

MIB = 1 << 20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="all-reduce busbw against size, ring against halving-doubling")
    ap.add_argument("--out", default=os.path.join("results", "sweep-from-python"))
    ap.add_argument("--check", action="store_true", help="plan every point and stop (no root needed)")
    args = ap.parse_args(argv)

    # %% The experiment, built from a mapping with the keys of an experiment file
    exp = dtnet.build({
        "name": "sweep-from-python",
        "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
        "scale": {"link": 2.5e-5, "bytes": 1.0e-3},          # 10 Mb/s links, 40x time dilation
        "jobs": [{"name": "ar", "hosts": {"count": 4, "placement": "spread"},
                  "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": MIB,
                               "iterations": 3}}],
    })

    # %% Change it with the dotted paths of --set: here, a sweep of sizes and algorithms
    swept = exp.set("sweep", {"grid": {"jobs.0.workload.size_bytes": [MIB, 16 * MIB, 64 * MIB],
                                       "jobs.0.workload.algorithm": ["ring", "halving-doubling"]}})
    for point in swept.points():
        print(f"  {point.slug}")

    # %% Check it: every point planned, as `dtnet check` does, without root
    print(swept.check())
    if args.check:
        return 0

    # %% Run it: each point into OUT/points/<point>/ (a second run resumes, skipping complete points)
    result = swept.run(args.out)
    print(result)

    # %% Read the results: one table of collectives across the points
    rows = []
    for slug, run in result.runs.items():
        for c in run.collectives():
            rows.append({"point": slug, "faithful": run.faithful, **c})
    for r in rows:
        print(f"  {r['algorithm']:<17} {r['size_bytes'] / MIB:>4.0f} MiB  busbw {r['busbw_gbps']:6.1f} Gb/s  "
              f"{r['cct_vs_predicted']:.2f}x alpha-beta  {'faithful' if r['faithful'] else 'NOT faithful'}")

    # %% Plot busbw against size, one line per algorithm
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for alg in sorted({r["algorithm"] for r in rows}):
        pts = sorted((r["size_bytes"] / MIB, r["busbw_gbps"]) for r in rows if r["algorithm"] == alg)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=alg)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("all-reduce size (MiB)")
    ax.set_ylabel("busbw (Gb/s, real cluster)")
    ax.legend()
    path = os.path.join(args.out, "busbw.png")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    print(f"chart: {path}")
    return 0 if not result.failed else 1


if __name__ == "__main__":
    sys.exit(main())
