"""The link qdisc's fast class, before and after: "IPv4 under 128 bytes" against "pure TCP ACKs only".

Commit 5e2ac42 stopped small data segments from taking the fast HTB class (they overtook
their own flow: reordering, spurious retransmissions). This bench re-measures the README's
canonical runs with both rules, alternating them run by run in one process, so that both see
the same machine: per experiment and rule, iteration time and busbw of every job, TCP
retransmissions and DSACKs, and the fidelity verdict; then old / new medians against each
rule's own run-to-run spread.

    sudo flock /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_shaping_ab.py [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from emulator.run import runner  # noqa: E402
from emulator.testbed import shaping  # noqa: E402
from experiment import model  # noqa: E402

# name -> (experiment file, overrides): the README's ring table (10 Mb/s) and the demo's three points.
CANON = {
    "ring-single-switch": ("ring-single-switch.yaml", []),
    "ring-fat-tree": ("ring-fat-tree.yaml", []),
    "ring-rail-16": ("ring-rail-16.yaml", []),
    "demo ecmp": ("demo.yaml", ["sweep={}", "controller.routing=ecmp"]),
    "demo congestion-aware": ("demo.yaml", ["sweep={}", "controller.routing=congestion-aware"]),
    "demo coschedule": ("demo.yaml", ["sweep={}", "controller.routing=coschedule"]),
    # The case that found it: a real gloo all-reduce (48-byte control messages inside its data
    # connections), 4 ranks, one per pod of a k=4 fat-tree. Needs torch.
    "gloo fat-tree": (None, []),
}
GLOO = {"name": "gloo-fat-tree", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
        "scale": {"link": 2.44140625e-5, "bytes": 9.765625e-4},
        "jobs": [{"name": "j", "hosts": {"count": 4, "placement": "spread"},
                  "workload": {"command": ["python", os.path.join(ROOT, "examples", "gloo_allreduce.py"),
                                           "--iterations", "5", "--sizes-bytes", "1048576"]}}]}
NEW_HTB = shaping.htb_cmds
OLD_CONTROL_MAX_BYTES = 128


def old_htb_cmds(dev: str, rate_mbps: float, queue_packets: int, mtu: int = 1500) -> list[str]:
    """The rule before 5e2ac42: the same classes, but every IPv4 packet under 128 bytes is fast."""
    lines = [ln for ln in NEW_HTB(dev, rate_mbps, queue_packets, mtu) if not ln.startswith("filter ")]
    return lines + [f"filter replace dev {dev} parent 5: protocol ip prio 1 u32 match u16 0x0000 "
                    f"{0xffff & ~(OLD_CONTROL_MAX_BYTES - 1):#06x} at 2 flowid 5:10"]


RULES = {"old (<128 B fast)": old_htb_cmds, "new (pure ACKs fast)": NEW_HTB}


def run(name: str, rule: str, out: str) -> dict:
    path, sets = CANON[name]
    if path is None:
        exp = model.parse(model.apply_overrides(GLOO, sets), os.path.join(ROOT, "bench", "gloo.yaml"))
    else:
        exp = model.load(os.path.join(ROOT, "experiments", path), sets)
    shaping.htb_cmds = RULES[rule]
    try:
        s = runner.run_experiment(exp, out, log=lambda *_: None)
    finally:
        shaping.htb_cmds = NEW_HTB
    jobs = s["jobs"]
    return {"iteration_s": statistics.fmean(j["iteration_time_s"]["mean"] for j in jobs),
            "busbw_gbps": statistics.fmean(c["busbw_gbps"] for j in jobs for c in j["collectives"]),
            "retrans": s["tcp"].get("retrans_segs", 0), "dsacks": s["tcp"].get("dsacks_received", 0),
            "out_of_order": s["tcp"].get("out_of_order", 0),
            "fidelity": "ok" if s["fidelity"]["ok"] else ",".join(c["name"] for c in s["fidelity"]["checks"]
                                                                     if not c["ok"])}


def spread(xs: list[float]) -> float:
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", nargs="+", default=list(CANON), choices=list(CANON))
    ap.add_argument("--repeat", type=int, default=2, help="runs per rule and experiment (alternating)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_shaping_ab: needs root (it runs the testbed)", file=sys.stderr)
        return 2
    # The runner's Testbed imports htb_cmds through the module: patching shaping.htb_cmds reaches it.
    assert runner.Testbed._shape_links.__code__.co_names.count("htb_cmds")
    results: dict = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        for name in args.experiments:
            for k in range(args.repeat):
                order = list(RULES) if k % 2 == 0 else list(RULES)[::-1]
                for rule in order:
                    r = run(name, rule, os.path.join(d, f"{name}-{rule[:3]}-{k}".replace(" ", "_")))
                    results.setdefault((name, rule), []).append(r)
                    print(f"{name:<22} {rule:<21} run {k + 1}: iteration {r['iteration_s'] * 1e3:7.2f} ms, busbw "
                          f"{r['busbw_gbps']:6.1f} Gb/s, retrans {r['retrans']:4d}, dsacks {r['dsacks']:4d}, "
                          f"out-of-order {r['out_of_order']:4d}, fidelity {r['fidelity']}", flush=True)
    print(f"\n{len(args.experiments) * args.repeat * len(RULES)} runs in {time.monotonic() - t0:.0f} s. "
          "Medians; spread = (max - min) / median over a rule's runs.")
    print(f"{'experiment':<22}{'old iteration':>15}{'new iteration':>15}{'new/old':>9}{'spread old/new':>16}"
          f"{'old busbw':>11}{'new busbw':>11}{'retrans old/new':>17}{'dsacks old/new':>16}")
    for name in args.experiments:
        old, new = results[(name, list(RULES)[0])], results[(name, list(RULES)[1])]
        it_o, it_n = [r["iteration_s"] for r in old], [r["iteration_s"] for r in new]
        mo, mn = statistics.median(it_o), statistics.median(it_n)
        print(f"{name:<22}{mo * 1e3:>12.2f} ms{mn * 1e3:>12.2f} ms{mn / mo:>9.3f}"
              f"{spread(it_o):>8.3f}/{spread(it_n):.3f}"
              f"{statistics.median(r['busbw_gbps'] for r in old):>11.1f}"
              f"{statistics.median(r['busbw_gbps'] for r in new):>11.1f}"
              f"{'/'.join(str(r['retrans']) for r in old):>9}|{'/'.join(str(r['retrans']) for r in new):<7}"
              f"{'/'.join(str(r['dsacks']) for r in old):>9}|{'/'.join(str(r['dsacks']) for r in new):<7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
