"""Wall time of a flow-engine sweep run here, and on local Dask clusters of 1 and 2 workers.

    flock /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_cluster_sweep.py [--rounds N] [--points 8 16]
                                                                              [--iterations N]

Each configuration runs the whole `dtnet run SWEEP.yaml --out DIR [--workers N]` command as a
process (cluster start and stop, every point's folder shipped back and unpacked included),
into a fresh folder each time, in rounds that take the configurations in turn (A B C D A B C D
...), so that a drift of the machine's load hits all of them alike. Printed: the median wall
time of each over the rounds, min-max, and its ratio to the local run and to one worker with
one slot, for each sweep size (8 and 16 flow points), and the seconds the points' simulations
took themselves (summary.json duration_s_wall, summed over the points: the work to share out).
--iterations sets each point's length (all-reduce iterations; 3: about 0.6 s of simulation).

The configurations:
- local: no flag; the points one after another in the dtnet process;
- 1 worker x 1 slot: one point at a time, in a runner process on the worker (what the cluster
  machinery costs, nothing run in parallel);
- 1 worker x 2 slots (what --workers 1 gives here: cores/1): two points at once in one worker;
- 2 workers x 1 slot (what --workers 2 gives here: cores/2): two points at once in two workers.

What this machine can and cannot show: it has 2 cores, shared with other engineers, so at most
two points run at once and the best ratio to the local run is about 2 less the cluster's own
cost (starting the scheduler and worker processes, a runner per slot, shipping folders).
It cannot show how a sweep scales over more machines, the network's cost of shipping large
folders between machines, or a cluster whose points are long enough to hide the startup.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTNET = os.path.join(ROOT, ".venv", "bin", "dtnet")


def sweep(points: int, iterations: int) -> dict:
    seeds = list(range(points // 4))
    return {"name": f"bench-cluster-{points}", "engine": "flow",
            "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400}, "controller": {"routing": "ecmp"},
            "jobs": [{"name": "j0", "hosts": {"count": 8, "placement": "spread"},
                      "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 536870912,
                                   "iterations": iterations}}],
            "sweep": {"grid": {"controller.routing": ["ecmp", "shortest"],
                               "jobs.0.workload.algorithm": ["ring", "halving-doubling"], "flow.ecmp_seed": seeds}}}


CONFIGS = {  # name -> dtnet run flags
    "local": [],
    "1 worker x 1 slot": ["--workers", "1", "--slots", "1"],
    "1 worker x 2 slots": ["--workers", "1", "--slots", "2"],
    "2 workers x 1 slot": ["--workers", "2", "--slots", "1"],
}


def run_once(path: str, flags: list, work: str) -> tuple[float, float]:
    """(wall s of the whole command, the points' own simulation s)."""
    out = tempfile.mkdtemp(prefix="out-", dir=work)
    t = time.monotonic()
    r = subprocess.run([DTNET, "run", path, "--out", out, *flags], capture_output=True, text=True,
                       cwd=work)
    took = time.monotonic() - t
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(flags) or 'local'} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    sim = 0.0
    for point in os.listdir(os.path.join(out, "points")):
        with open(os.path.join(out, "points", point, "summary.json")) as f:
            sim += json.load(f)["duration_s_wall"]
    shutil.rmtree(out)
    return took, sim


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs of each configuration, taken in turn")
    ap.add_argument("--points", type=int, nargs="+", default=[8, 16], help="sweep sizes (multiples of 4)")
    ap.add_argument("--iterations", type=int, default=3, help="all-reduce iterations per point (its length)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-cluster-")
    try:
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
              f"{args.rounds} rounds, configurations in turn")
        for n in args.points:
            path = os.path.join(work, f"sweep-{n}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(sweep(n, args.iterations), f, sort_keys=False)
            run_once(path, [], work)  # warm-up: the page cache, .pyc files
            times: dict[str, list[float]] = {c: [] for c in CONFIGS}
            sims: dict[str, list[float]] = {c: [] for c in CONFIGS}
            for _ in range(args.rounds):
                for name, flags in CONFIGS.items():
                    took, sim = run_once(path, flags, work)
                    times[name].append(took)
                    sims[name].append(sim)
            med = {c: statistics.median(t) for c, t in times.items()}
            print(f"\n{n} flow points of {args.iterations} iterations (dtnet run, whole command), "
                  f"load average {os.getloadavg()[0]:.1f} at the end")
            print(f"{'configuration':<22}{'median s':>10}{'min-max s':>16}{'local / it':>12}{'1x1 / it':>10}"
                  f"{'points sim s':>14}")
            for c, t in times.items():
                print(f"{c:<22}{med[c]:>10.2f}{f'{min(t):.2f}-{max(t):.2f}':>16}"
                      f"{med['local'] / med[c]:>11.2f}x{med['1 worker x 1 slot'] / med[c]:>9.2f}x"
                      f"{statistics.median(sims[c]):>14.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
