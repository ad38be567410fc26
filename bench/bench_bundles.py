"""Bundles against the detailed model for chained collectives, and what a bundle's shape costs.

    .venv/bin/python bench/bench_bundles.py [--quick] [--max-old 2048] [--max-gpus 4096]

1. Agreement: each point (fabric, collective, size) runs three times in this process: the
   detailed model (every transfer, the agents' gating), bundles in stages (a stage per
   whole-receive wait of the schedule; what `bundle` runs), and the whole collective as one
   bundle (the model before stages). Ratios are bundle / detailed; the stated agreement is 5%.
2. Cost: a hierarchical all-reduce (1 GiB) on a rail-optimized fabric, 8 GPUs per server, as
   N grows: the shape from the schedule (build_schedule and send_dependencies, the only way
   before stages; points up to --max-old) against the closed-form stages, then the whole
   simulation with them. Each point in its own process, so that its peak RSS is its own.

Times are CPU seconds of this process (time.process_time): the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

GIB, MIB = 1 << 30, 1 << 20


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _fabric(name: str):
    from topologies import fat_tree, rail_optimized, single_switch
    kind, _, arg = name.partition(" ")
    if kind == "single-switch":
        return single_switch(int(arg), link_gbps=400)
    if kind == "fat-tree":
        return fat_tree(int(arg), link_gbps=400)
    servers, gps = (int(x) for x in arg.split("x"))
    return rail_optimized(servers, gps, max(2, gps), link_gbps=400, nvlink_gbps=3600)


def run_once(fabric: str, op: str, algorithm: str, size_bytes: int, model: str, latency_s: float = 0.0,
             one_bundle: bool = False) -> tuple[float, float]:
    """(collective time s, CPU s) of one collective under one model."""
    import flowsim.engine as engine
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from traffic.collectives.templates import bundle_shape, bundle_stages
    from traffic.workload import build_workload
    fab = _fabric(fabric)
    gps = fab.params.get("gpus_per_server")
    tr = build_workload({"collective": op, "algorithm": algorithm, "size_bytes": size_bytes}, len(fab.hosts),
                        gpus_per_server=gps)
    if one_bundle:  # the model before stages: every connection of the collective tied at once
        engine.bundle_stages = lambda *a: (bundle_shape(*a),)
    try:
        t0 = time.process_time()
        res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                         Params(collective_model=model, slice_bytes=16384, latency_s=latency_s)).run()
        wall = time.process_time() - t0
    finally:
        engine.bundle_stages = bundle_stages
    assert res.complete, res.stalled
    return res.collectives()[0]["cct_s"], wall


POINTS = [  # (fabric, op, algorithm, size_bytes, latency_s)
    ("single-switch 16", "all_reduce", "ring", 256 * MIB, 0.0),
    ("fat-tree 4", "all_reduce", "ring", 256 * MIB, 0.0),
    ("single-switch 16", "all_reduce", "tree", 256 * MIB, 0.0),
    ("fat-tree 4", "all_reduce", "tree", 256 * MIB, 0.0),
    ("fat-tree 4", "all_reduce", "tree", 1 * MIB, 0.0),
    ("rail 4x4", "all_reduce", "tree", 256 * MIB, 0.0),
    ("single-switch 16", "all_reduce", "halving-doubling", 256 * MIB, 0.0),
    ("fat-tree 4", "all_reduce", "halving-doubling", 256 * MIB, 0.0),
    ("fat-tree 4", "all_reduce", "halving-doubling", 1 * MIB, 0.0),
    ("fat-tree 4", "reduce_scatter", "halving-doubling", 256 * MIB, 0.0),
    ("fat-tree 4", "all_gather", "halving-doubling", 256 * MIB, 0.0),
    ("rail 4x4", "all_reduce", "halving-doubling", 256 * MIB, 0.0),
    ("rail 4x4", "all_reduce", "hierarchical", 256 * MIB, 0.0),
    ("rail 4x4", "all_reduce", "hierarchical", 1 * MIB, 0.0),
    ("rail 4x4", "all_reduce", "hierarchical", 256 * MIB, 5e-6),
    ("rail 4x4", "reduce_scatter", "hierarchical", 256 * MIB, 0.0),
    ("rail 4x4", "all_gather", "hierarchical", 256 * MIB, 0.0),
    ("rail 4x4", "all_to_all", "hierarchical", 64 * MIB, 0.0),
    ("rail 32x8", "all_reduce", "hierarchical", 1 * GIB, 0.0),
    ("rail 32x8", "all_reduce", "tree", 1 * GIB, 0.0),
    ("rail 32x8", "all_reduce", "halving-doubling", 1 * GIB, 0.0),
    ("rail 56x8", "all_reduce", "hierarchical", 1 * GIB, 0.0),
]
QUICK = [p for p in POINTS if not p[0].startswith(("rail 32", "rail 56"))]


def agreement(points) -> int:
    print("1. bundle / detailed, one collective, ECMP seed 0, 16 KiB slices (stated agreement: 5%)")
    print(f"{'fabric':<18}{'collective':<34}{'size':>8}{'lat us':>7}{'detailed ms':>13}{'stages ms':>11}"
          f"{'ratio':>7}{'one bundle ms':>15}{'ratio':>7}{'detailed cpu s':>15}{'stages cpu s':>13}")
    from flowsim.runner import BUNDLE_AGREEMENT, BUNDLE_DISAGREES
    worst = {True: 0.0, False: 0.0}  # outside the agreement by design (auto keeps them detailed) or not
    for fabric, op, algorithm, size, lat in points:
        d, dw = run_once(fabric, op, algorithm, size, "detailed", lat)
        s, sw = run_once(fabric, op, algorithm, size, "bundle", lat)
        o, _ = run_once(fabric, op, algorithm, size, "bundle", lat, one_bundle=True)
        out = algorithm in BUNDLE_DISAGREES
        worst[out] = max(worst[out], abs(s / d - 1))
        size_s = f"{size // GIB} GiB" if size >= GIB else f"{size // MIB} MiB"
        print(f"{fabric:<18}{op + ' ' + algorithm:<34}{size_s:>8}{lat * 1e6:>7.0f}{d * 1e3:>13.3f}{s * 1e3:>11.3f}"
              f"{s / d:>7.3f}{o * 1e3:>15.3f}{o / d:>7.3f}{dw:>15.2f}{sw:>13.3f}", flush=True)
    print(f"largest |stages / detailed - 1|: {worst[False]:.1%} (stated: {BUNDLE_AGREEMENT:.0%}); "
          f"{', '.join(BUNDLE_DISAGREES)}, which auto keeps detailed: {worst[True]:.1%}")
    return 0 if worst[False] <= BUNDLE_AGREEMENT else 1


def point_cost(kind: str, gpus: int) -> dict:
    """One cost point: 'old' builds the shape from the schedule, 'new' the stages in closed form and
    runs the simulation."""
    from traffic.collectives.templates import hierarchical_stages, stages_of_template, template
    g, size = 8, GIB
    t0 = time.process_time()
    if kind == "old":
        shape = stages_of_template(template("all_reduce", "hierarchical", gpus, size, 0, g))
        return {"shape_s": time.process_time() - t0, "stages": len(shape), "rss_gb": _rss_gb()}
    shape = hierarchical_stages("all_reduce", gpus, size, g)
    shape_s = time.process_time() - t0
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from traffic.workload import build_workload
    fab = _fabric(f"rail {gpus // g}x{g}")
    tr = build_workload({"collective": "all_reduce", "algorithm": "hierarchical", "size_bytes": size}, gpus,
                        gpus_per_server=g)
    t0 = time.process_time()
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                     Params(collective_model="bundle")).run()
    return {"shape_s": shape_s, "stages": len(shape), "run_s": time.process_time() - t0,
            "cct_ms": res.collectives()[0]["cct_s"] * 1e3, "rss_gb": _rss_gb()}


def _child(kind: str, gpus: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--point", kind, str(gpus)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
    return json.loads(out.stdout)


def cost(max_old: int, max_gpus: int) -> None:
    print("\n2. hierarchical all-reduce 1 GiB, rail-optimized, 8 GPUs per server: the bundle's shape from the "
          "schedule (old) against closed-form stages (new), each point in its own process")
    print(f"{'GPUs':>6}{'old shape s':>13}{'old RSS GB':>12}{'new shape s':>13}{'run s':>8}{'CCT ms':>9}"
          f"{'new RSS GB':>12}  growth (old, new run) for x2")
    prev = None
    gpus = 256
    while gpus <= max_gpus:
        old = _child("old", gpus) if gpus <= max_old else None
        new = _child("new", gpus)
        o = "" if old is None else (f"{old['shape_s']:>13.2f}{old['rss_gb']:>12.2f}" if "error" not in old
                                    else f"{'failed':>25}")
        o = o or f"{'-':>13}{'-':>12}"
        grow = ""
        if prev is not None:
            po, pn = prev
            go = f"x{old['shape_s'] / po['shape_s']:.1f}" if old and po and "error" not in old else "-"
            grow = f"  {go}, x{new['run_s'] / pn['run_s']:.1f}"
        print(f"{gpus:>6}{o}{new['shape_s']:>13.3f}{new['run_s']:>8.2f}{new['cct_ms']:>9.3f}{new['rss_gb']:>12.2f}"
              f"{grow}", flush=True)
        prev = (old, new)
        gpus *= 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="16-GPU agreement points and cost up to 1,024 GPUs")
    ap.add_argument("--max-old", type=int, default=2048, help="largest N for the shape from the schedule")
    ap.add_argument("--max-gpus", type=int, default=4096, help="largest N for the closed-form stages")
    ap.add_argument("--point", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        print(json.dumps(point_cost(args.point[0], int(args.point[1]))))
        return 0
    status = agreement(QUICK if args.quick else POINTS)
    cost(min(args.max_old, 1024) if args.quick else args.max_old, 1024 if args.quick else args.max_gpus)
    return status


if __name__ == "__main__":
    sys.exit(main())
