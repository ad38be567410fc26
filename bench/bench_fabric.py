"""Fabric build time and memory as the host count grows, for every builder.

Run: python bench/bench_fabric.py [--max-hosts 131072] [--cli] [--baseline CHECKOUT]
Each point builds one fabric in a fresh child process (so its peak RSS is that fabric's
alone) and reports build seconds, peak RSS, hosts, links, microseconds per host and per
link, and the growth of time and memory against the builder's previous point: a linear
builder shows a time ratio close to the host ratio. Issue 14's target: 131,072 hosts in
under 10 s. With --cli it also times `dtnet topo show SPEC` as a user runs it. With
--baseline it builds single-switch fabrics of 2,000 to 20,000 hosts with another checkout's
topologies/ too (PYTHONPATH=CHECKOUT), each pair side by side, and prints the ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
TARGET_HOSTS, TARGET_S = 131072, 10.0

# builder -> specs in growing size (each about 4x the last), up to ~131k hosts
SWEEPS = {
    "single-switch": [f"single-switch:hosts={n}" for n in (2048, 8192, 32768, 131072)],
    "leaf-spine": [f"leaf-spine:leaves={n // 64},spines=16,hosts_per_leaf=64" for n in (2048, 8192, 32768, 131072)],
    "fat-tree": [f"fat-tree:k={k}" for k in (20, 32, 50, 80)],
    "rail-optimized": [f"rail-optimized:servers={n // 8},gpus_per_server=8,spines=16"
                       for n in (2048, 8192, 32768, 131072)],
    "superpod": [f"superpod:sus={s}" for s in (8, 16, 32, 64)],
    "hpn": [f"hpn:segments={s}" for s in (1, 4, 15)],
}


def child(spec: str) -> None:
    from topologies import from_spec
    t0 = time.perf_counter()
    fab = from_spec(spec)
    dt = time.perf_counter() - t0
    c = fab.counts()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"spec": spec, "build_s": dt, "rss_mb": rss_mb, "hosts": c["hosts"], "links": c["links"],
                      "switches": c["switches"]}))


def point(spec: str, root: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=root) if root else None
    argv = [sys.executable, __file__, "--child", spec] + (["--root", root] if root else [])
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def cli_time(spec: str) -> float:
    dtnet = os.path.join(os.path.dirname(sys.executable), "dtnet")
    t0 = time.perf_counter()
    subprocess.run([dtnet, "topo", "show", spec], capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-hosts", type=int, default=TARGET_HOSTS)
    ap.add_argument("--cli", action="store_true", help="also time `dtnet topo show` on the largest point")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="another checkout to compare single-switch builds with")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.root:  # the baseline's topologies/, not ours
            sys.path.insert(0, args.root)
            sys.modules.pop("topologies", None)
        child(args.child)
        return 0
    if args.baseline:
        print(f"{'hosts':>8}{'baseline s':>12}{'this s':>9}{'ratio':>8}")
        for n in (2000, 5000, 10000, 20000):
            old, new = point(f"single-switch:hosts={n}", os.path.abspath(args.baseline)), point(f"single-switch:hosts={n}")
            print(f"{n:>8}{old['build_s']:>12.2f}{new['build_s']:>9.2f}{old['build_s'] / new['build_s']:>7.0f}x")
    print(f"{'builder':<15}{'hosts':>8}{'links':>9}{'build s':>9}{'RSS MB':>8}{'us/host':>9}{'us/link':>9}"
          f"{'x hosts':>9}{'x time':>8}{'x mem':>7}  spec")
    worst = []
    for name, specs in SWEEPS.items():
        prev = None
        for spec in specs:
            r = point(spec)
            if r["hosts"] > args.max_hosts:
                continue
            grow = ("", "", "") if prev is None else (f"{r['hosts'] / prev['hosts']:.1f}",
                                                      f"{r['build_s'] / prev['build_s']:.1f}",
                                                      f"{r['rss_mb'] / prev['rss_mb']:.1f}")
            print(f"{name:<15}{r['hosts']:>8}{r['links']:>9}{r['build_s']:>9.2f}{r['rss_mb']:>8.0f}"
                  f"{1e6 * r['build_s'] / r['hosts']:>9.1f}{1e6 * r['build_s'] / r['links']:>9.1f}"
                  f"{grow[0]:>9}{grow[1]:>8}{grow[2]:>7}  {spec}")
            prev = r
            if r["hosts"] >= 100_000:
                worst.append((r["build_s"], spec))
        if args.cli and prev is not None:
            print(f"{'':<15}dtnet topo show {prev['spec']}: {cli_time(prev['spec']):.2f} s whole command")
    for s, spec in worst:
        verdict = "meets" if s < TARGET_S else "MISSES"
        print(f"target: {spec} built in {s:.2f} s, {verdict} the {TARGET_S:g} s target for ~{TARGET_HOSTS} hosts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
