"""How far the flow engine scales: GPT-3 175B iterations and ring all-reduces up to 131,072 GPUs.

    flock /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_flow_scale.py [--quick] [--max-gpus N]

Each point runs in its own process, so that its peak RSS is its own. Three tables:

1. one GPT-3 175B iteration (tp 8, pp 8, dp = GPUs / 64, Megatron's global batch of 1,536
   sequences, H100 compute) on a DGX SuperPOD (rail-optimized, 8 GPUs per server, NVLink
   inside), ECMP: the fabric, the trace (rank classes), the engine's run, its events, and the
   modelled iteration time; rank classes make the engine simulate one rank per pipeline stage;
2. `dtnet run` (experiment file in, every output written: summary.json, events.jsonl,
   trace.json, links.csv, plots) of the same at 1,024 and 16,384 GPUs, and of
   experiments/ring-131072.yaml;
3. one ring all-reduce of 1 GiB over N GPUs on a three-tier fat-tree (topologies' builder).

Goals (issue 15): GPT-3 at 1,024 GPUs under 10 s and at 16,384 under 60 s; the 131,072-GPU ring
under 60 s; memory under 8 GB. The growth column is the wall time's growth over the previous row.
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
sys.path.insert(0, ROOT)


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def point_gpt(gpus: int) -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from topologies import build
    from traffic.workload import build_workload
    t0 = time.perf_counter()
    fab = build("superpod", {"sus": gpus // 256, "link_gbps": 400, "nvlink_gbps": 3600})
    t1 = time.perf_counter()
    tr = build_workload({"model": "gpt3-175b", "tp": 8, "pp": 8, "dp": gpus // 64, "iterations": 1, "gpu": "h100"},
                        gpus, gpus_per_server=8)
    t2 = time.perf_counter()
    net = Net.from_fabric(fab)
    sim = Simulation(net, [JobSpec("gpt", fab.hosts[:gpus], tr)], EcmpRouter(0), Params(collective_model="bundle"))
    t3 = time.perf_counter()
    res = sim.run()
    t4 = time.perf_counter()
    return {"gpus": gpus, "fabric_s": t1 - t0, "trace_s": t2 - t1, "setup_s": t3 - t2, "run_s": t4 - t3,
            "total_s": t4 - t0, "actors": sim.n_ranks, "ops_per_rank": len(tr.classes[0].ops),
            "events": res.counters["events"], "solves": res.counters["solves"],
            "iteration_s": res.iteration_times_s("gpt")[0], "done": res.complete, "rss_gb": _rss_gb()}


def point_dtnet(gpus: int) -> dict:
    """`dtnet run` of an experiment file, in a subprocess, timed from outside (0: ring-131072.yaml)."""
    exp = {"name": f"gpt3-175b-{gpus}", "engine": "flow",
           "topology": {"kind": "superpod", "sus": gpus // 256, "link_gbps": 400, "nvlink_gbps": 3600},
           "controller": {"routing": "ecmp"},
           "jobs": [{"name": "gpt", "hosts": "all",
                     "workload": {"model": "gpt3-175b", "tp": 8, "pp": 8, "dp": gpus // 64, "iterations": 1,
                                  "gpu": "h100"}}]}
    import yaml
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "exp.yaml")
        if gpus:
            with open(path, "w") as f:
                yaml.safe_dump(exp, f)
        else:
            path = os.path.join(ROOT, "experiments", "ring-131072.yaml")
        timing = os.path.join(tmp, "time")
        t0 = time.perf_counter()
        rc = subprocess.run(["/usr/bin/time", "-o", timing, "-f", "%e %M", os.path.join(ROOT, ".venv", "bin", "dtnet"),
                             "run", path, "--out", os.path.join(tmp, "out")], capture_output=True, text=True).returncode
        wall = time.perf_counter() - t0
        with open(timing) as f:
            _, rss_kb = f.read().split()[-2:]
        with open(os.path.join(tmp, "out", "summary.json")) as f:
            s = json.load(f)
        sizes = {n: os.path.getsize(os.path.join(tmp, "out", n)) for n in ("events.jsonl", "trace.json", "links.csv")}
    return {"gpus": gpus or 131072, "what": "GPT-3" if gpus else "ring", "rc": rc, "wall_s": wall,
            "rss_gb": int(rss_kb) / 1e6,
            "iteration_s": s["aggregate"]["iteration_time_s_mean"], "engine_s": s["model"]["run_s"],
            "files_mb": {k: round(v / 1e6, 1) for k, v in sizes.items()}}


def point_ring(gpus: int) -> dict:
    import numpy as np

    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from topologies import fat_tree
    from traffic.workload import build_workload
    k = 2
    while k ** 3 // 4 < gpus:
        k += 2
    t0 = time.perf_counter()
    fab = fat_tree(k, link_gbps=400)
    net = Net.from_fabric(fab)
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1 << 30}, gpus)
    hosts = fab.hosts[:gpus]
    sim = Simulation(net, [JobSpec("ring", hosts, tr)], EcmpRouter(0), Params(collective_model="bundle"))
    t1 = time.perf_counter()
    res = sim.run()
    t2 = time.perf_counter()
    (c,) = res.collectives()
    busbw = (1 << 30) * 8 / c["cct_s"] / 1e9 * 2 * (gpus - 1) / gpus
    return {"gpus": gpus, "k": k, "hosts": int(net.n_hosts), "setup_s": t1 - t0, "run_s": t2 - t1,
            "total_s": t2 - t0, "cct_ms": c["cct_s"] * 1e3, "busbw_gbps": busbw, "done": res.complete,
            "rss_gb": _rss_gb(), "connections": int(np.size(sim.C_src))}


def _child(kind: str, n: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--point", kind, str(n)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"gpus": n, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _growth(rows, i, key):
    if i == 0 or "error" in rows[i] or "error" in rows[i - 1]:
        return ""
    return f"x{rows[i][key] / rows[i - 1][key]:.1f} for x{rows[i]['gpus'] / rows[i - 1]['gpus']:g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--max-gpus", type=int, default=131072)
    ap.add_argument("--point", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        kind, n = args.point[0], int(args.point[1])
        print(json.dumps({"gpt": point_gpt, "dtnet": point_dtnet, "ring": point_ring}[kind](n)))
        return 0
    gpt = [n for n in (512, 1024, 2048, 4096, 8192, 16384) if n <= args.max_gpus][: 3 if args.quick else None]
    print("1. one GPT-3 175B iteration (tp 8, pp 8), rail-optimized, ECMP, rank classes (engine only)")
    print(f"{'GPUs':>7}{'fabric s':>10}{'trace s':>9}{'run s':>8}{'total s':>9}{'ranks sim':>10}{'ops/rank':>9}"
          f"{'events':>8}{'iter s':>9}{'RSS GB':>8}  growth of run s")
    rows = []
    for n in gpt:
        r = _child("gpt", n)
        rows.append(r)
        if "error" in r:
            print(f"{n:>7}  failed: {r['error']}")
            continue
        print(f"{n:>7}{r['fabric_s']:>10.2f}{r['trace_s']:>9.2f}{r['run_s']:>8.2f}{r['total_s']:>9.2f}{r['actors']:>10}"
              f"{r['ops_per_rank']:>9}{r['events']:>8}{r['iteration_s']:>9.3f}{r['rss_gb']:>8.2f}  "
              f"{_growth(rows, len(rows) - 1, 'run_s')}", flush=True)
    print("\n2. `dtnet run` of an experiment file (every output written): GPT-3 as above, the ring of table 3")
    print(f"{'':>7}{'GPUs':>7}{'wall s':>9}{'engine s':>10}{'iter s':>9}{'RSS GB':>8}  files (MB)")
    for n in [x for x in (1024, 16384, 0) if x <= args.max_gpus][: 1 if args.quick else None]:
        r = _child("dtnet", n)
        if "error" in r:
            print(f"{n:>7}  failed: {r['error']}")
            continue
        print(f"{r['what']:>7}{r['gpus']:>7}{r['wall_s']:>9.2f}{r['engine_s']:>10.2f}{r['iteration_s']:>9.3f}"
              f"{r['rss_gb']:>8.2f}  {r['files_mb']}", flush=True)
    print("\n3. one ring all-reduce of 1 GiB, three-tier fat-tree, ECMP, bundle")
    print(f"{'GPUs':>7}{'k':>4}{'hosts':>8}{'setup s':>9}{'run s':>8}{'total s':>9}{'CCT ms':>9}{'busbw':>8}"
          f"{'RSS GB':>8}  growth of total s")
    rows = []
    for n in [x for x in (1024, 8192, 65536, 131072) if x <= args.max_gpus][: 2 if args.quick else None]:
        r = _child("ring", n)
        rows.append(r)
        if "error" in r:
            print(f"{n:>7}  failed: {r['error']}")
            continue
        print(f"{n:>7}{r['k']:>4}{r['hosts']:>8}{r['setup_s']:>9.2f}{r['run_s']:>8.2f}{r['total_s']:>9.2f}"
              f"{r['cct_ms']:>9.3f}{r['busbw_gbps']:>8.1f}{r['rss_gb']:>8.2f}  {_growth(rows, len(rows) - 1, 'total_s')}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
