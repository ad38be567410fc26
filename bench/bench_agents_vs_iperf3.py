"""dtnet's agents against iperf3, side by side on the same fabric and scale.

Both drive the same ring pattern (host i sends to host i+1): iperf3 as
long-lived TCP streams, dtnet as a ring all-reduce replayed by its agents.
The figure is the ratio of their aggregate received rates; >= 0.9 means the
agents are not the bottleneck. Needs root.

    sudo .venv/bin/python bench/bench_agents_vs_iperf3.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.run.runner import run_experiment  # noqa: E402
from emulator.testbed.iperf import iperf3_flows  # noqa: E402
from emulator.testbed.lifecycle import Testbed  # noqa: E402
from experiment import model, placement  # noqa: E402

FABRICS = {
    "single-switch:hosts=8": "ring-single-switch.yaml",
    "fat-tree:k=4": "ring-fat-tree.yaml",
}


def iperf3_ring(exp, out_dir, duration_s=8):
    fabric = exp.fabric()
    hosts = placement.job_hosts(exp.jobs[0], fabric)
    ring = [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]
    with Testbed(fabric, out_dir, policy=exp.routing, params=exp.policy_params, scale_link=exp.scale.link,
                 datapath=exp.testbed.datapath, log=lambda *_: None) as tb:
        return sum(iperf3_flows(tb, ring, duration_s))


def agents_ring(exp, out_dir):
    s = run_experiment(exp, out_dir, log=lambda *_: None)
    # Emulated aggregate = real aggregate x scale.link.
    return s["traffic"]["aggregate_gbps"] * 1000 * exp.scale.link, s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"{'fabric':<24}{'iperf3 Mb/s':>13}{'agents Mb/s':>13}{'ratio':>8}   (median of {args.repeat}, emulated units)")
    for spec, name in FABRICS.items():
        exp = model.load(os.path.join(root, "experiments", name), ["jobs.0.workload.iterations=5"])
        ip, ag = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as d:
                ip.append(iperf3_ring(exp, os.path.join(d, "iperf3")))
                ag.append(agents_ring(exp, os.path.join(d, "agents"))[0])
        i, a = statistics.median(ip), statistics.median(ag)
        print(f"{spec:<24}{i:>13.1f}{a:>13.1f}{a / i:>8.3f}   ratios {[round(x / y, 3) for x, y in zip(ag, ip)]}")


if __name__ == "__main__":
    main()
