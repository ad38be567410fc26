"""What the rank plan's declared schema costs: file size and the agent's read time.

For each experiment: the largest rank plan as written (named fields, defaults left out)
against the same plan with the old positional lists, and reading every plan with
checking (badinput.schema.from_json) against a bare json.loads, side by side in one
run. No root. Usage: bench/bench_contracts.py [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from badinput.schema import from_json, to_dict, to_json  # noqa: E402
from experiment import model  # noqa: E402
from experiment.plan import build_plans  # noqa: E402
from experiment.rankplan import RankPlan  # noqa: E402

CASES = [("ring-rail-32.yaml", []), ("gpt-small-3d.yaml", []),
         ("gpt-3d-breakdown.yaml", ["sweep={}", "jobs.0.workload.microbatches=8"])]


def positional(plan) -> str:
    """The plan in the format before the schema: sends and receives as [tid, peer, step, bytes]."""
    d = to_dict(plan)
    for o in d["ops"]:
        o["send_deps"] = [[s["after"], s["follow"]] for s in o["sends"]]
        o["sends"] = [[s["tid"], s["dst"], s["step"], s["size_bytes"]] for s in o["sends"]]
        o["recvs"] = [[r["tid"], r["src"], r["step"], r["size_bytes"]] for r in o["recvs"]]
    return json.dumps(d, separators=(",", ":"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"{'experiment':<24}{'ranks':>6}{'plan kB':>9}{'positional kB':>15}{'size x':>8}"
          f"{'read ms/rank':>14}{'json.loads':>12}{'time x':>8}")
    for name, sets in CASES:
        exp = model.load(os.path.join(root, "experiments", name), sets)
        plans = [p for job in build_plans(exp, exp.fabric()) for p in job.ranks]
        texts = [to_json(p, skip_defaults=True) for p in plans]
        big = max(range(len(plans)), key=lambda i: len(texts[i]))
        old = positional(plans[big])
        read, loads = [], []
        for _ in range(args.repeat):  # interleaved, so that load on the machine hits both alike
            t = time.perf_counter()
            for x in texts:
                from_json(RankPlan, x)
            read.append((time.perf_counter() - t) / len(texts))
            t = time.perf_counter()
            for x in texts:
                json.loads(x)
            loads.append((time.perf_counter() - t) / len(texts))
        r, j = statistics.median(read), statistics.median(loads)
        print(f"{name:<24}{len(plans):>6}{len(texts[big]) / 1e3:>9.1f}{len(old) / 1e3:>15.1f}"
              f"{len(texts[big]) / len(old):>8.2f}{r * 1e3:>14.2f}{j * 1e3:>12.2f}{r / j:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
