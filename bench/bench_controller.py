"""How the controller's policy scales: path computation and Hedera GFF on fat-trees.

  python bench/bench_controller.py [--k 4 8 16 32] [--rules-up-to-k 16]

Per k it prints the fat-tree size, the time to compute every switch's
next-hop sets (all destinations), to materialize every switch's flow
entries and groups, and to run demand estimation plus Global First Fit for
a stride pattern (every host sends at line rate to the host k^3/8 away, so
every flow crosses the core). ``growth`` columns are the ratio to the
previous k, against the host-count ratio (x8 per doubling of k).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from controller.hedera import estimate_demands, global_first_fit, path_links  # noqa: E402
from controller.routing import NextHops, equal_cost_paths, switch_routes  # noqa: E402
from topologies import fat_tree  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_k(k: int, rules: bool) -> dict:
    fabric = fat_tree(k)
    hosts = fabric.hosts
    row = {"k": k, "hosts": len(hosts), "switches": len(fabric.switches)}
    nh = NextHops(fabric)
    row["nexthops_s"], _ = timed(nh.compute_all)

    if rules:
        def all_rules():
            n_flows = n_groups = 0
            for sw in fabric.openflow_switches:
                f, g = switch_routes(fabric, sw, "ecmp", nh)
                n_flows += len(f)
                n_groups += len(g)
            return n_flows, n_groups
        row["rules_s"], (row["flow_entries"], row["groups"]) = timed(all_rules)
    else:
        row["rules_s"] = row["flow_entries"] = row["groups"] = None
    # One edge switch's table: what a switch connect costs the controller.
    row["one_switch_s"], _ = timed(lambda: switch_routes(fabric, "edge0_0", "ecmp", nh))

    n = len(hosts)
    pairs = [(hosts[i], hosts[(i + n // 2) % n]) for i in range(n)]
    cap = {}
    for a, b, d in fabric.graph.edges(data=True):
        cap[a, b] = cap[b, a] = d["link_gbps"]
    row["paths_s"], cands = timed(lambda: [[path_links(s, p, d) for p in equal_cost_paths(fabric, s, d, nh)]
                                           for s, d in pairs])
    row["demand_s"], frac = timed(lambda: estimate_demands(pairs))
    demands = [f * fabric.host_link_gbps(s) for f, (s, _) in zip(frac, pairs)]
    row["gff_s"], (chosen, reserved) = timed(lambda: global_first_fit(demands, cands, cap.__getitem__))
    row["gff_placed"] = sum(c is not None for c in chosen) / len(chosen)
    row["max_util"] = max(v / cap[ln] for ln, v in reserved.items())
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--rules-up-to-k", type=int, default=32,
                    help="materialize every flow entry only up to this k (k=32 makes ~10M)")
    args = ap.parse_args(argv)
    rows = []
    for k in args.k:
        rows.append(bench_k(k, k <= args.rules_up_to_k))
        r = rows[-1]
        prev = rows[-2] if len(rows) > 1 else None

        def g(key):
            return f"x{r[key] / prev[key]:.1f}" if prev and prev.get(key) and r.get(key) else "-"
        rules = f"{r['rules_s']:.2f}s ({r['flow_entries']} entries, {r['groups']} groups, growth {g('rules_s')})" \
            if r["rules_s"] is not None else "skipped"
        print(f"k={k:2d} hosts={r['hosts']:5d} switches={r['switches']:4d} | "
              f"next-hops {r['nexthops_s']:.3f}s (growth {g('nexthops_s')}) | all rules {rules} | "
              f"one switch {r['one_switch_s'] * 1e3:.1f}ms | "
              f"stride: paths {r['paths_s']:.2f}s, demands {r['demand_s']:.2f}s, "
              f"GFF {r['gff_s']:.2f}s (growth {g('gff_s')}), placed {r['gff_placed']:.0%}, "
              f"max util {r['max_util']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
