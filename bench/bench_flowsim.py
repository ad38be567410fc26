"""How the flow engine's cost grows with flow count and fabric size.

    .venv/bin/python bench/bench_flowsim.py [--quick] [--max-k 64] [--max-gpus 131072]

Three tables, each point in its own process (so its peak RSS is its own), with the growth
of wall time against the growth of the problem:

1. routing and sharing: one flow per host (Hedera's stride pattern, host i -> i + H/2) on a
   k-ary fat-tree: ECMP placement of every flow (vectorized, hop by hop), one max-min solve,
   and the whole engine (a send per host through Simulation);
2. one ring all-reduce (1 GiB) over N GPUs on a three-tier fat-tree, collective_model=bundle;
3. the detailed model (every transfer, the agents' gating) against bundle on one switch:
   time, events, and the two CCTs' ratio.

Fat-trees are built by flowsim.Net.fat_tree (arrays), since topologies' networkx builders
stop at 65,534 hosts today.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def point_stride(k: int) -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from flowsim.maxmin import incidence_matrix, max_min_rates
    from flowsim.routing import five_tuple_hash
    from traffic.trace import Op, Trace
    t0 = time.perf_counter()
    net = Net.fat_tree(k, link_gbps=400)
    t_build = time.perf_counter() - t0
    h = net.n_hosts
    src = np.arange(h)
    dst = (src + h // 2) % h
    keys = five_tuple_hash(net.host_ip[src], net.host_ip[dst], 40000, 20000)
    router = EcmpRouter(0)
    t0 = time.perf_counter()
    indptr, links = router.route(net, src, dst, keys)
    t_route = time.perf_counter() - t0
    t0 = time.perf_counter()
    a = incidence_matrix(indptr, links, net.n_links)
    rates, rounds = max_min_rates(a, net.capacity_Bps, return_rounds=True)
    t_solve = time.perf_counter() - t0
    # The whole engine: one 1 GiB send per host, as a trace.
    ops = {r: [Op("x", "send", size_bytes=1 << 30, peer=int(dst[r])),
               Op("x", "recv", size_bytes=1 << 30, peer=int((r - h // 2) % h))] for r in range(h)}
    tr = Trace(nranks=h, groups={}, ops=ops)
    t0 = time.perf_counter()
    res = Simulation(net, [JobSpec("j", [f"h{i}" for i in range(h)], tr)], EcmpRouter(0), Params()).run()
    t_sim = time.perf_counter() - t0
    return {"k": k, "hosts": h, "links": net.n_links, "nnz": int(len(links)), "build_s": t_build,
            "route_s": t_route, "solve_s": t_solve, "rounds": rounds, "sim_s": t_sim,
            "events": res.counters["events"], "mean_gbps": float(rates.mean() * 8 / 1e9),
            "complete": res.complete, "rss_gb": _rss_gb()}


def _k_for(gpus: int) -> int:
    k = 2
    while k ** 3 // 4 < gpus:
        k += 2
    return k


def point_ring(gpus: int) -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from traffic.workload import build_workload
    k = _k_for(gpus)
    t0 = time.perf_counter()
    net = Net.fat_tree(k, link_gbps=400)
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1 << 30}, gpus)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = Simulation(net, [JobSpec("j", [f"h{i}" for i in range(gpus)], tr)], EcmpRouter(0),
                     Params(collective_model="bundle")).run()
    t_run = time.perf_counter() - t0
    c = res.collectives()[0]
    busbw = (1 << 30) / c["cct_s"] * 2 * (gpus - 1) / gpus * 8 / 1e9
    return {"gpus": gpus, "k": k, "setup_s": t_setup, "run_s": t_run, "cct_ms": c["cct_s"] * 1e3,
            "busbw_gbps": busbw, "complete": res.complete, "rss_gb": _rss_gb()}


def point_detailed(n: int) -> dict:
    from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
    from topologies import single_switch
    from traffic.workload import build_workload
    fab = single_switch(n, link_gbps=400)
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": 256 << 20}, n)
    out = {"ranks": n}
    for model in ("detailed", "bundle"):
        t0 = time.perf_counter()
        res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                         Params(collective_model=model, slice_bytes=16384)).run()
        out[f"{model}_s"] = time.perf_counter() - t0
        out[f"{model}_cct_ms"] = res.collectives()[0]["cct_s"] * 1e3
        out[f"{model}_events"] = res.counters["events"]
    out["rss_gb"] = _rss_gb()
    return out


POINTS = {"stride": point_stride, "ring": point_ring, "detailed": point_detailed}


def _run_point(kind: str, arg: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--point", kind, str(arg)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def _table(title, rows, size_key, time_key, cols):
    """Print rows under their headers, with the growth of time_key against size_key."""
    print("\n" + title)
    widths = [max(len(h) + 2, 8) for h, _, _ in cols]
    print("".join(f"{h:>{w}}" for (h, _, _), w in zip(cols, widths)) + "  growth")
    for r, g in zip(rows, _growth(rows, size_key, time_key)):
        if "error" in r:
            print(f"  failed: {r['error']}")
            continue
        print("".join(f"{format(r[k], f):>{w}}" for (_, k, f), w in zip(cols, widths)) + f"  {g}")


def _growth(rows, size_key, time_key):
    out, prev = [], None
    for r in rows:
        if prev is None or "error" in r or "error" in prev:
            out.append("")
        else:
            out.append(f"x{r[time_key] / prev[time_key]:.1f} for x{r[size_key] / prev[size_key]:.0f}")
        prev = r
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    ap.add_argument("--max-k", type=int, default=64, help="largest fat-tree k for the stride table")
    ap.add_argument("--max-gpus", type=int, default=131072, help="largest ring for the ring table")
    ap.add_argument("--point", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        print(json.dumps(POINTS[args.point[0]](int(args.point[1]))))
        return 0
    ks = [k for k in (8, 16, 32, 64) if k <= (16 if args.quick else args.max_k)]
    gpus = [g for g in (1024, 4096, 16384, 65536, 131072) if g <= (4096 if args.quick else args.max_gpus)]
    ns = [8, 16, 32] if args.quick else [8, 16, 32, 64, 128]

    _table("1. one flow per host (stride), fat-tree, ECMP: route, one max-min solve, whole engine",
           [_run_point("stride", k) for k in ks], "hosts", "sim_s",
           [("k", "k", "d"), ("hosts", "hosts", "d"), ("links", "links", "d"), ("nnz", "nnz", "d"),
            ("route s", "route_s", ".3f"), ("solve s", "solve_s", ".3f"), ("rounds", "rounds", "d"),
            ("engine s", "sim_s", ".2f"), ("events", "events", "d"), ("Gb/s", "mean_gbps", ".0f"),
            ("done", "complete", ""), ("RSS GB", "rss_gb", ".2f")])
    _table("2. one ring all-reduce of 1 GiB, three-tier fat-tree, ECMP, collective_model=bundle",
           [_run_point("ring", n) for n in gpus], "gpus", "run_s",
           [("GPUs", "gpus", "d"), ("k", "k", "d"), ("setup s", "setup_s", ".2f"), ("run s", "run_s", ".2f"),
            ("CCT ms", "cct_ms", ".3f"), ("busbw Gb/s", "busbw_gbps", ".1f"), ("done", "complete", ""),
            ("RSS GB", "rss_gb", ".2f")])
    rows = [_run_point("detailed", n) for n in ns]
    for r in rows:
        if "error" not in r:
            r["ratio"] = r["bundle_cct_ms"] / r["detailed_cct_ms"]
    _table("3. detailed (every transfer, slice gating) vs bundle: ring all-reduce 256 MiB, one switch",
           rows, "ranks", "detailed_s",
           [("ranks", "ranks", "d"), ("detailed s", "detailed_s", ".2f"), ("events", "detailed_events", "d"),
            ("bundle s", "bundle_s", ".3f"), ("CCT ms", "detailed_cct_ms", ".3f"),
            ("bundle/detailed", "ratio", ".4f"), ("RSS GB", "rss_gb", ".2f")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
