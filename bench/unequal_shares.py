"""Can static unequal shares explain why many flows from one NIC end late at packet level?

The direct all-reduce's first phase on one 400 Gb/s switch: every rank sends `--mib` MiB to every
other, each flow crossing its sender's uplink and its receiver's downlink. Max-min with equal shares
ends every flow at (n - 1) x size / line rate. Here each flow gets a seeded lognormal weight (mean 1,
the given coefficients of variation) and weighted max-min is recomputed at every flow's end
(`flowsim.maxmin.fluid_completion_times`); the phase's end over the equal-share end is printed per
seed. The packet engine's phase takes 1.12 of it (docs/flow-engine.md, "Against the packet engine").

    .venv/bin/python bench/unequal_shares.py [--ranks 16] [--mib 2] [--cv 0.1,0.2,0.3,0.5] [--seeds 3]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flowsim.maxmin import fluid_completion_times  # noqa: E402

LINE_BPS = 400e9 / 8


def phase_over_equal(ranks: int, size_bytes: float, cv: float, seed: int) -> float:
    pairs = [(i, j) for i in range(ranks) for j in range(ranks) if i != j]
    links = np.array([[i, ranks + j] for i, j in pairs]).ravel()  # uplink i, downlink j
    indptr = np.arange(0, 2 * len(pairs) + 1, 2)
    sigma = np.sqrt(np.log1p(cv * cv))
    w = np.random.default_rng(seed).lognormal(-sigma * sigma / 2, sigma, len(pairs))
    end = fluid_completion_times(indptr, links, np.full(2 * ranks, LINE_BPS), np.full(len(pairs), size_bytes),
                                 weights=w)
    return float(end.max() / ((ranks - 1) * size_bytes / LINE_BPS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--mib", type=float, default=2.0)
    ap.add_argument("--cv", default="0,0.1,0.2,0.3,0.5", help="coefficients of variation of the weights")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"direct phase, {args.ranks} ranks x {args.mib:g} MiB to each other rank, one switch: "
          "phase end / equal-share end, per seed")
    for cv in (float(c) for c in args.cv.split(",")):
        ratios = [phase_over_equal(args.ranks, args.mib * (1 << 20), cv, s) for s in range(args.seeds)]
        print(f"  weights CV {cv:4.2f}: " + "  ".join(f"{r:.3f}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
