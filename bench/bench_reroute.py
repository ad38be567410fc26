"""Reroute latency on real OVS: from a congested link being observed to the
reroute being installed.

Runs Hedera's staggered pattern on a k=4 fat-tree under congestion-aware
routing (experiments/staggered-fat-tree.yaml), where GFF moves colliding
elephants (stride(8), the bench's first workload, is now placed without a
collision when its connections open, and leaves nothing to move), and reads
every rebalance the controller made from controller-state.json:
- observe -> install: newest port-statistics reply before the decision, to
  the last barrier reply of the reroute (make-before-break, all stages);
- decide -> install: the OpenFlow part alone.
Also the detection delay of each moved flow: from its placement to its move.
Times are wall-clock (emulated) and, divided by the time dilation, real-cluster.

    sudo .venv/bin/python bench/bench_reroute.py [--repeat 3] [--set testbed.switch_daemons=shared]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.run.runner import run_experiment  # noqa: E402
from badinput import InputError  # noqa: E402
from experiment import model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--experiment", default=os.path.join(ROOT, "experiments", "staggered-fat-tree.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as dtnet run --set")
    args = ap.parse_args(argv)
    try:
        exp = model.load(args.experiment, ["controller.routing=congestion-aware", *args.set])
    except InputError as e:  # a bad file or --set: one line, exit 2
        print(f"bench_reroute.py: {e}", file=sys.stderr)
        return 2
    obs, dec, detect = [], [], []
    with tempfile.TemporaryDirectory(prefix="dtnet-reroute-") as tmp:
        for i in range(args.repeat):
            out = os.path.join(tmp, str(i))
            s = run_experiment(exp, out, log=lambda *_: None)
            with open(os.path.join(out, "controller-state.json")) as f:
                st = json.load(f)
            done = [r for r in st["reroutes"] if r["installed_s"]]
            obs += [r["installed_s"] - r["observed_s"] for r in done if r["observed_s"]]
            dec += [r["installed_s"] - r["decided_s"] for r in done]
            placed = {d["flow_id"]: d["time_s"] for d in st["decisions"] if d["action"] == "place"}
            detect += [d["time_s"] - placed[d["flow_id"]] for d in st["decisions"]
                       if d["action"] == "move" and d["flow_id"] in placed and d["reason"].startswith("GFF")]
            print(f"run {i}: {len(done)} reroutes installed of {len(st['reroutes'])}, "
                  f"normalized throughput {s['traffic']['normalized_throughput']:.3f}", flush=True)
    if not dec:
        print("no reroute was installed: this workload left nothing to time (see --experiment)")
    dil = exp.scale.dilation
    print(f"\n{'':<26}{'n':>4}{'p50 ms':>9}{'p90 ms':>9}{'max ms':>9}   real-cluster p50 (/ dilation {dil:g})")
    for name, xs in (("observe -> installed", obs), ("decide -> installed", dec),
                     ("flow placed -> moved", detect)):
        ms = [1e3 * x for x in xs]
        print(f"{name:<26}{len(ms):>4}{pct(ms, .5):>9.1f}{pct(ms, .9):>9.1f}{max(ms, default=float('nan')):>9.1f}"
              f"   {statistics.median(ms) / dil if ms else float('nan'):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
