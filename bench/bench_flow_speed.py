"""The flow engine's speed, old code against new, side by side in one run, with the same answers.

    .venv/bin/python bench/bench_flow_speed.py --old TREE [--tables gpt,ring,big,answers,hd] [--max-gpus N]
        [--max-hd-gpus N]

TREE is a checkout of the code to compare with (for example `git worktree add /tmp/old <commit>`);
without --old only the current tree runs. Each point runs in its own process, once per tree, the
two in turn, timed in CPU seconds of the engine's part (fabric, trace, simulation; a whole run's
includes the children it reaped, such as its forked plot writer); peak RSS is the process's. Tables:

1. gpt: one GPT-3 175B iteration (tp 8, pp 8, dp = GPUs / 64, rank classes, bundle model) on a
   three-tier fat-tree with one GPU per host, so that tensor parallelism crosses the network;
   1,024 GPUs up to --max-gpus (16,384), and at 1,024 on a DGX SuperPOD (NVLink) for reference;
2. ring: a 256 MiB ring all-reduce on one switch with `collective_model: detailed`, 16 to 256 GPUs;
3. big: a 1 GiB ring all-reduce over 131,072 GPUs (k=82 fat-tree, bundle);
4. answers: files of experiments/ through `dtnet run`'s pipeline on the flow engine, detailed and
   bundle: every iteration time and collective time of the new tree against the old one;
5. hd: a 1 MiB halving-doubling all-reduce on a k=16 fat-tree, `collective_model: detailed` (what
   `auto` keeps detailed), the controller's shortest paths, 128 GPUs up to --max-hd-gpus (1,024: the
   packet reference's point).

The growth column is the new tree's CPU time over the previous row's.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (file, --set overrides): small experiments of every kind the engine runs (each file's first sweep point).
ANSWER_FILES = [
    ("ring-single-switch.yaml", ()),
    ("ring-fat-tree.yaml", ()),
    ("ring-rail-16.yaml", ()),
    ("collectives-fat-tree.yaml", ("jobs.0.workload.algorithm=tree", "jobs.0.workload.size_bytes=268435456")),
    ("collectives-fat-tree.yaml", ("jobs.0.workload.algorithm=halving-doubling",
                                   "jobs.0.workload.size_bytes=268435456")),
    ("collectives-rail.yaml", ()),
    ("gpt-small-3d.yaml", ()),
    ("straggler.yaml", ()),
    ("link-down-fat-tree.yaml", ()),
    ("three-jobs-contending.yaml", ()),
    ("two-jobs-coschedule.yaml", ()),
    ("latency-ring.yaml", ()),
    ("moe-a2a-fat-tree.yaml", ()),
    ("stride-fat-tree.yaml", ()),
]


def _use_tree(tree: str):
    sys.path.insert(0, tree)
    for name in [m for m in sys.modules if m.split(".")[0] in ("flowsim", "traffic", "topologies", "experiment")]:
        del sys.modules[name]


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it reaped (a run's forked plot writer)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _k_for(gpus: int) -> int:
    k = 2
    while k ** 3 // 4 < gpus:
        k += 2
    return k


def point_gpt(gpus: int, fabric: str = "fat-tree") -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from topologies import build
    from traffic.workload import build_workload
    c0, t0 = _cpu_s(), time.perf_counter()
    if fabric == "superpod":
        fab, gps = build("superpod", {"sus": gpus // 256, "link_gbps": 400, "nvlink_gbps": 3600}), 8
    else:
        fab, gps = build("fat-tree", {"k": _k_for(gpus), "link_gbps": 400}), 1
    tr = build_workload({"model": "gpt3-175b", "tp": 8, "pp": 8, "dp": gpus // 64, "iterations": 1, "gpu": "h100"},
                        gpus, gpus_per_server=gps)
    c1 = _cpu_s()
    sim = Simulation(Net.from_fabric(fab), [JobSpec("gpt", fab.hosts[:gpus], tr)], EcmpRouter(0),
                     Params(collective_model="bundle"))
    res = sim.run()
    return {"gpus": gpus, "cpu_s": _cpu_s() - c0, "run_cpu_s": _cpu_s() - c1,
            "wall_s": time.perf_counter() - t0, "events": res.counters["events"],
            "answer": res.iteration_times_s("gpt")[0], "rss_gb": _rss_gb()}


def point_ring(gpus: int, model: str = "detailed", size_bytes: int = 1 << 28) -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from topologies import build
    from traffic.workload import build_workload
    c0, t0 = _cpu_s(), time.perf_counter()
    if model == "detailed":
        fab = build("single-switch", {"hosts": gpus, "link_gbps": 400})
    else:
        fab = build("fat-tree", {"k": _k_for(gpus), "link_gbps": 400})
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": size_bytes}, gpus)
    sim = Simulation(Net.from_fabric(fab), [JobSpec("ring", fab.hosts[:gpus], tr)], EcmpRouter(0),
                     Params(collective_model=model))
    res = sim.run()
    (c,) = res.collectives()
    return {"gpus": gpus, "cpu_s": _cpu_s() - c0, "wall_s": time.perf_counter() - t0,
            "events": res.counters["events"], "answer": c["cct_s"], "rss_gb": _rss_gb()}


def point_answers(_: int) -> dict:
    """Every iteration and collective time of ANSWER_FILES, detailed and bundle."""
    from experiment import model
    from flowsim.runner import run_experiment
    out, c0 = {}, _cpu_s()
    for name, sets in ANSWER_FILES:
        for cm in ("detailed", "bundle"):
            exp = model.load(os.path.join(ROOT, "experiments", name),
                             ["sweep={}", "engine=flow", f"flow.collective_model={cm}", *sets])
            with tempfile.TemporaryDirectory() as tmp:
                s = run_experiment(exp, tmp, log=lambda *a, **k: None)
            figs = []
            for j in s["jobs"]:
                figs += list(j["iteration_time_s"]["all"])
                figs += [x for c in j.get("collectives", []) for x in c["cct_s_all"]]
            out[f"{name} {' '.join(sets)} {cm}".replace("  ", " ")] = figs
    return {"gpus": 0, "cpu_s": _cpu_s() - c0, "answers": out, "rss_gb": _rss_gb()}


def point_hd(gpus: int) -> dict:
    """One halving-doubling all-reduce of 1 MiB over the first GPUs of a k=16 fat-tree, detailed."""
    from flowsim import JobSpec, Net, Params, ShortestRouter, Simulation
    from topologies import build
    from traffic.workload import build_workload
    c0, t0 = _cpu_s(), time.perf_counter()
    fab = build("fat-tree", {"k": 16, "link_gbps": 400})
    tr = build_workload({"collective": "all_reduce", "algorithm": "halving-doubling", "size_bytes": 1 << 20}, gpus)
    sim = Simulation(Net.from_fabric(fab), [JobSpec("hd", fab.hosts[:gpus], tr)], ShortestRouter(),
                     Params(collective_model="detailed"))
    res = sim.run()
    (c,) = res.collectives()
    return {"gpus": gpus, "cpu_s": _cpu_s() - c0, "wall_s": time.perf_counter() - t0,
            "events": res.counters["events"], "answer": c["cct_s"], "rss_gb": _rss_gb()}


POINTS = {"gpt": point_gpt, "hd": point_hd, "gpt-pod": lambda n: point_gpt(n, "superpod"), "ring": point_ring,
          "big": lambda n: point_ring(n, "bundle", 1 << 30), "answers": point_answers}


def _child(tree: str, kind: str, n: int) -> dict:
    cmd = [sys.executable, __file__, "--point", kind, str(n), "--tree", tree]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:
        return {"gpus": n, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def _table(title: str, kind: str, sizes: list[int], old: str | None, unit: str):
    print(title)
    print(f"{'GPUs':>7}{'old cpu s':>11}{'new cpu s':>11}{'new/old':>9}{'old ' + unit:>15}{'new ' + unit:>15}"
          f"{'rel diff':>10}{'new RSS GB':>12}  growth of new cpu s")
    prev = None
    for n in sizes:
        b = _child(old, kind, n) if old else None
        a = _child(ROOT, kind, n)
        if "error" in a or (b and "error" in b):
            print(f"{n:>7}  failed: {a.get('error') or b.get('error')}")
            prev = None
            continue
        grow = f"x{a['cpu_s'] / prev['cpu_s']:.1f} for x{n / prev['gpus']:g}" if prev else ""
        ob = f"{b['cpu_s']:>11.2f}" if b else f"{'-':>11}"
        ratio = f"{a['cpu_s'] / b['cpu_s']:>9.3f}" if b else f"{'-':>9}"
        oans = f"{b['answer']:>15.9g}" if b else f"{'-':>15}"
        diff = f"{_rel(a['answer'], b['answer']):>10.1e}" if b else f"{'-':>10}"
        print(f"{n:>7}{ob}{a['cpu_s']:>11.2f}{ratio}{oans}{a['answer']:>15.9g}{diff}{a['rss_gb']:>12.2f}  {grow}",
              flush=True)
        prev = a


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", help="a checkout of the code to compare with")
    ap.add_argument("--tables", default="gpt,ring,big,answers,hd")
    ap.add_argument("--max-gpus", type=int, default=16384, help="largest GPT point")
    ap.add_argument("--max-hd-gpus", type=int, default=1024, help="largest halving-doubling point")
    ap.add_argument("--point", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        _use_tree(os.path.abspath(args.tree))
        print(json.dumps(POINTS[args.point[0]](int(args.point[1]))))
        return 0
    old = os.path.abspath(args.old) if args.old else None
    tables = set(args.tables.split(","))
    if "gpt" in tables:
        sizes = [n for n in (1024, 2048, 4096, 8192, 16384) if n <= args.max_gpus]
        _table("1. one GPT-3 175B iteration (tp 8, pp 8), fat-tree, one GPU per host, ECMP, rank classes, bundle",
               "gpt", sizes, old, "iter s")
        _table("   the same on a DGX SuperPOD (8 GPUs per server on NVLink)", "gpt-pod", [1024], old, "iter s")
    if "ring" in tables:
        _table("2. ring all-reduce of 256 MiB, one switch, collective_model detailed", "ring",
               [16, 32, 64, 128, 256], old, "CCT s")
    if "big" in tables:
        _table("3. ring all-reduce of 1 GiB, k=82 fat-tree, bundle", "big", [131072], old, "CCT s")
    if "hd" in tables:
        _table("5. halving-doubling all-reduce of 1 MiB, fat-tree k=16, shortest paths, collective_model detailed",
               "hd", [n for n in (128, 256, 512, 1024) if n <= args.max_hd_gpus], old, "CCT s")
    if "answers" in tables and old:
        b, a = _child(old, "answers", 0), _child(ROOT, "answers", 0)
        if "error" in a or "error" in b:
            print(f"4. answers failed: {a.get('error') or b.get('error')}")
            return 1
        worst, n = 0.0, 0
        print("4. answers of experiments/ files, new against old (largest relative difference per run)")
        for key, new in a["answers"].items():
            oldv = b["answers"].get(key, [])
            d = max((_rel(x, y) for x, y in zip(new, oldv)), default=0.0) if len(new) == len(oldv) else float("inf")
            worst, n = max(worst, d), n + len(new)
            print(f"   {key:<100} {len(new):>4} figures  max rel diff {d:.1e}")
        print(f"   {n} figures in {len(a['answers'])} runs; largest relative difference {worst:.1e}; "
              f"CPU s old {b['cpu_s']:.1f}, new {a['cpu_s']:.1f} (whole runs, outputs included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
