"""How the controller's policies scale, and what this code costs against an older checkout.

  python bench/bench_controller.py [--k 8 16 32 64] [--rules-up-to-k 16]
  python bench/bench_controller.py --baseline DIR [--ab-k 4 8 16] [--rounds 5] [--k]

Scale (this checkout), per fat-tree k, one flow per host (stride n/2: every flow
crosses the core), the way an engine drives the policy objects (no OpenFlow):

- ECMP: ``path_of`` for every flow under the ``ecmp`` policy's forwarding, the
  routes found on demand (one breadth-first search per destination switch);
- congestion-aware: ``flow_started`` for every flow (the least-loaded of its
  equal-cost paths, pending demands counted), then, every flow measured at line
  rate, one ``poll`` (Hedera's Global First Fit over all of them);
- one switch's rules (what a switch connect costs the emulator's controller), and
  every switch's rules up to --rules-up-to-k.

``growth`` is the ratio to the previous k (hosts grow x8 per doubling of k); ``cpu`` is
the process's own CPU time beside the wall time (on a shared machine wall exceeds it).

--baseline DIR: the same operations through FabricController (what the Ryu
adapter calls: bench/controller_ops.py) for this checkout and DIR's, in turn,
--rounds times, in one run; the ratio is this / DIR per round, median (min-max).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from badinput import InputError  # noqa: E402
from controller.load import LinkLoad  # noqa: E402
from controller.paths import ShortestPaths  # noqa: E402
from controller.policy import Flow, FlowKey, Observation, path_of  # noqa: E402
from controller.registry import make_policy  # noqa: E402
from controller.routing import switch_routes  # noqa: E402
from topologies import fat_tree  # noqa: E402


CPU: dict = {}  # phase -> CPU seconds of this process, beside the wall seconds timed() returns


def timed(fn, name=None):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if name:
        CPU[name] = time.process_time() - c0
    return time.perf_counter() - t0, out


def stride_flows(fabric) -> list[tuple[str, str, FlowKey]]:
    hosts = fabric.hosts
    n = len(hosts)
    ip = {h: fabric.node(h)["ip"] for h in hosts}
    return [(h, hosts[(i + n // 2) % n], FlowKey(ip[h], ip[hosts[(i + n // 2) % n]], 6, 40000 + i % 20000, 5000))
            for i, h in enumerate(hosts)]


def engine(fabric, policy: str):
    """What an engine holds for a policy: its structure, loads, watched flows, observation."""
    pol = make_policy(policy, fabric)
    flows: dict = {}
    obs = Observation(0.0, fabric, ShortestPaths(fabric), LinkLoad(fabric), flows, flows_version=0)
    obs.forwarding = pol.forwarding(0.0, obs)
    return pol, obs, flows


def bench_k(k: int, rules: bool) -> dict:
    row = {"k": k}
    try:
        row["build_s"], fabric = timed(lambda: fat_tree(k))
    except InputError as e:
        row["error"] = f"the fabric builder of this checkout cannot make it: {e}"
        return row
    row["hosts"], row["switches"] = len(fabric.hosts), len(fabric.switches)
    flows = stride_flows(fabric)

    # ECMP: where does each flow go?
    def ecmp():
        pol, obs, _ = engine(fabric, "ecmp")
        got = [path_of(key, s, d, {}, obs.forwarding, obs.paths) for s, d, key in flows]
        return obs.paths, got
    row["ecmp_s"], (paths, got) = timed(ecmp, "ecmp")
    row["ecmp_routed"] = sum(p is not None for p in got) / len(got)
    row["searches"] = paths.searches

    # Congestion-aware: place every flow, then first-fit them all as elephants.
    pol, obs, watched = engine(fabric, "congestion-aware")

    def place():
        for i, (s, d, key) in enumerate(flows):
            f = Flow(i + 1, key, s, d, None, 0.0)
            p = pol.flow_started(0.0, f, obs)
            f.path = p.path if p is not None else None
            watched[key] = f
    row["place_s"], _ = timed(place, "place")
    for f in watched.values():
        f.measured, f.rate_gbps = True, fabric.host_link_gbps(f.src)
    obs.flows_version += 1
    row["gff_s"], moves = timed(lambda: pol.poll(1.0, obs), "gff")
    row["gff_moves"] = len(moves)

    row["cpu"] = dict(CPU)
    fwd = obs.forwarding
    row["one_switch_s"], _ = timed(lambda: switch_routes(fabric, fabric.switches[-1], fwd, 1, obs.paths))
    if rules:
        def all_rules():
            n_flows = n_groups = 0
            for sw in fabric.openflow_switches:
                f, g = switch_routes(fabric, sw, fwd, 1, obs.paths)
                n_flows += len(f)
                n_groups += len(g)
            return n_flows, n_groups
        row["rules_s"], (row["flow_entries"], row["groups"]) = timed(all_rules)
    return row


def scale(args) -> list[dict]:
    rows = []
    print(f"scale, this checkout ({os.path.abspath(ROOT)}); one flow per host, stride n/2")
    for k in args.k:
        r = bench_k(k, k <= args.rules_up_to_k)
        rows.append(r)
        if "error" in r:
            print(f"k={k:2d} skipped: {r['error']}", flush=True)
            continue
        prev = next((p for p in reversed(rows[:-1]) if "error" not in p), None)

        def g(key):
            return f"x{r[key] / prev[key]:.1f}" if prev and prev.get(key) and r.get(key) else "-"
        rules = f"all rules {r['rules_s']:.2f}s ({r['flow_entries']} entries), " if "rules_s" in r else ""
        cpu = r["cpu"]
        print(f"k={k:2d} hosts={r['hosts']:6d} switches={r['switches']:5d} | "
              f"ECMP {r['ecmp_s']:6.2f}s (cpu {cpu['ecmp']:.2f}s, growth {g('ecmp_s')}; {r['searches']} searches, "
              f"{r['ecmp_routed']:.0%} routed) | congestion-aware: place {r['place_s']:6.2f}s "
              f"(cpu {cpu['place']:.2f}s, growth {g('place_s')}), GFF {r['gff_s']:5.2f}s (cpu {cpu['gff']:.2f}s, "
              f"growth {g('gff_s')}; {r['gff_moves']} moves) | {rules}one switch {r['one_switch_s'] * 1e3:.1f}ms | "
              f"fabric build {r['build_s']:.2f}s", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {rss:.0f} MB; load average {' '.join(open('/proc/loadavg').read().split()[:3])} "
          "(cpu: this process's CPU seconds; wall above it means the machine was shared)")
    return rows


def ab(args) -> None:
    """This checkout against --baseline, operation by operation, in turn."""
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "controller_ops.py")
    trees = {"baseline": os.path.abspath(args.baseline), "this": os.path.abspath(ROOT)}
    print(f"A/B through FabricController: this ({trees['this']}) / baseline ({trees['baseline']}), "
          f"{args.rounds} rounds in turn, best of 3 within each")
    for k in args.ab_k:
        got: dict[str, list[dict]] = {"baseline": [], "this": []}
        for rnd in range(args.rounds):
            for side in (("baseline", "this") if rnd % 2 == 0 else ("this", "baseline")):
                out = subprocess.run([sys.executable, driver, trees[side], str(k), "--repeat", "3"],
                                     capture_output=True, text=True, check=True).stdout
                got[side].append(json.loads(out.strip().splitlines()[-1]))
        for op in got["this"][0]:
            base = [r[op] for r in got["baseline"]]
            this = [r[op] for r in got["this"]]
            ratios = [t / b for t, b in zip(this, base)]
            print(f"  k={k:2d} {op:<45} baseline {statistics.median(base) * 1e3:9.2f} ms  "
                  f"this {statistics.median(this) * 1e3:9.2f} ms  ratio {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f})", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="*", default=[8, 16, 32, 64])
    ap.add_argument("--rules-up-to-k", type=int, default=16,
                    help="materialize every switch's rules only up to this k (k=32 makes ~10M entries)")
    ap.add_argument("--baseline", help="a dtnet checkout to compare with (e.g. a worktree of main)")
    ap.add_argument("--ab-k", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.baseline:
        ab(args)
    if args.k:
        scale(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
