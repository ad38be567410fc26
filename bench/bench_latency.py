"""Link latency against the alpha-beta model, where the kernel has netem (the lab VM).

Runs each point of a latency sweep (default experiments/lab-latency.yaml: a
1 MiB ring all-reduce on 8 GPUs under one switch, topology.latency_us = L per
hop, the model's alpha = prediction.latency_us = hops x L per step) and
compares what the latency adds: the measured collective time at L minus at
L = 0, against what the model adds, steps x alpha. The emulator's own cost
of a collective (large under software emulation) is there at every L and
cancels in the difference, so the ratio says how faithfully the delay itself
is emulated; cct / alpha-beta says how far the whole time is from the model.

    sudo .venv/bin/python bench/bench_latency.py [EXPERIMENT] [--repeat N] [--out DIR]

--out DIR keeps each run's folder (DIR/<point>-<repeat>) and writes
DIR/bench.tsv. Where the kernel has no netem (this machine kind) it stops
with a one-line error (exit 2), as `dtnet run` does.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench_fidelity_scale

import networkx as nx  # noqa: E402

from badinput import InputError, one_line  # noqa: E402
from bench_fidelity_scale import finish  # noqa: E402
from emulator.run.runner import run_experiment  # noqa: E402
from emulator.testbed.datapath import netem_available  # noqa: E402
from experiment import model, sweep  # noqa: E402
from experiment.engine import RunFailure  # noqa: E402

DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments",
                       "lab-latency.yaml")
HEAD = ["L us", "alpha us", "cct ms", "+-", "model ms", "cct/ab", "added ms", "+-", "model added ms",
        "added/model", "added us/step", "idle min", "retrans", "status"]
WIDTHS = [7, 8, 8, 6, 9, 7, 9, 6, 14, 11, 13, 8, 7, 9]


def hops_per_step(exp) -> int:
    """Links between two hosts, the same for every pair (one switch, one leaf): else a ring step's
    alpha would depend on the placement."""
    fabric = exp.fabric()
    hosts = set(fabric.hosts)
    lengths = {n for h in hosts for dst, n in nx.single_source_shortest_path_length(fabric.graph, h).items()
               if dst in hosts and dst != h}
    if len(lengths) != 1:
        raise InputError("topology", "a fabric whose hosts are all the same number of links apart (one switch)",
                         f"{min(lengths)}..{max(lengths)} links", exp.source)
    return lengths.pop()


def points(path: str) -> list:
    """The sweep's points, each with alpha = hops x latency_us; a point at latency 0 first."""
    exp = model.load(path, [])
    if not exp.sweep:
        raise InputError("sweep", "a list of topology.latency_us points (experiments/lab-latency.yaml)", "none",
                         exp.source)
    pts = sweep.expand(exp)
    for p in pts:
        alpha = hops_per_step(p.exp) * p.exp.latency_us
        if not math.isclose(p.exp.prediction.latency_us, alpha, abs_tol=1e-9):
            raise InputError(f"sweep point {p.index} ({p.slug}): prediction.latency_us",
                             f"{hops_per_step(p.exp)} hops x topology.latency_us = {alpha:g}",
                             p.exp.prediction.latency_us, exp.source)
    if pts[0].exp.latency_us != 0:
        raise InputError("sweep", "a first point with topology.latency_us: 0 (the baseline)",
                         pts[0].exp.latency_us, exp.source)
    return pts


def one_run(exp, out_dir: str) -> dict:
    try:
        s = run_experiment(exp, out_dir, log=lambda *_: None)
    except RunFailure as e:
        print(f"{exp.point}: run failed: {e}", flush=True)
        return {"status": "failed", "cct": [], "predicted": float("nan"), "idle_min": float("nan"), "retrans": 0}
    (job,) = s["jobs"]
    (coll,) = job["collectives"]
    cpu = next(c for c in s["fidelity"]["checks"] if c["name"] == "cpu")
    return {"status": s["status"], "cct": coll["cct_s_all"], "predicted": coll["predicted_cct_s"],
            "idle_min": cpu.get("idle_min_pct") or 0.0, "retrans": s["tcp"].get("retrans_segs", 0)}


def mean_se(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", nargs="?", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=1, help="runs per point, pooled")
    ap.add_argument("--out", help="keep the runs' folders here (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    try:
        pts = points(args.experiment)
        if not netem_available():
            raise InputError("topology.latency_us", "a kernel with netem (sch_netem): run this in the lab VM "
                             "(docs/lab-vm.md)", "none here", args.experiment)
    except InputError as e:
        print(f"bench_latency.py: {one_line(str(e))}", file=sys.stderr)
        return 2
    exp0 = pts[0].exp
    print(f"{exp0.name}: dilation {exp0.scale.dilation:g}; {hops_per_step(exp0)} links a step; "
          f"times in real-cluster units")
    print(" ".join(f"{c:>{w}}" for c, w in zip(HEAD, WIDTHS)), flush=True)
    rows, base = [], None
    with tempfile.TemporaryDirectory(prefix="dtnet-bench-") as tmp:
        for p in pts:
            runs = [one_run(p.exp, os.path.join(args.out or tmp, f"{p.slug}-{i}"))
                    for i in range(args.repeat)]
            cct = [t for r in runs for t in r["cct"]]
            m, se = mean_se(cct)
            pred = runs[0]["predicted"]
            if base is None:
                base = (m, se, pred)
            added, added_se, model_added = m - base[0], math.hypot(se, base[1]), pred - base[2]
            alpha = p.exp.prediction.latency_us
            steps = round(model_added / (alpha * 1e-6)) if alpha else 0
            status = "complete" if all(r["status"] == "complete" for r in runs) else "failed"
            row = [f"{p.exp.latency_us:g}", f"{alpha:g}", f"{m * 1e3:.2f}", f"{se * 1e3:.2f}", f"{pred * 1e3:.3f}",
                   f"{m / pred:.2f}", f"{added * 1e3:.2f}", f"{added_se * 1e3:.2f}", f"{model_added * 1e3:.3f}",
                   f"{added / model_added:.3f}" if model_added else "-",
                   f"{added / steps * 1e6:.0f}" if steps else "-",
                   f"{min(r['idle_min'] for r in runs):.0f}%", str(sum(r["retrans"] for r in runs)), status]
            rows.append(row)
            print(" ".join(f"{c:>{w}}" for c, w in zip(row, WIDTHS)), flush=True)
    return finish(args.out, HEAD, rows)


if __name__ == "__main__":
    sys.exit(main())
