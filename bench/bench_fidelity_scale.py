"""How results and fidelity measurements move with `scale` on this machine.

Runs one experiment at several link scales, keeping the time dilation
(bytes / link) fixed, so the same real-cluster workload is emulated with
more or fewer packets per second. If a result does not change while the CPU
idle share drops, CPU idle was not what limited it; where the result starts
to fall, the emulation stopped keeping up. That is the evidence behind the
fidelity thresholds (emulator/run/fidelity.py) and the README's recommended scale.

    sudo .venv/bin/python bench/bench_fidelity_scale.py experiments/ring-fat-tree.yaml \
        --links 6.25e-6,1.25e-5,2.5e-5,5e-5 [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.run.runner import run_experiment  # noqa: E402
from experiment import model  # noqa: E402


def check(summary: dict, name: str) -> dict:
    return next(c for c in summary["fidelity"]["checks"] if c["name"] == name)


def one_run(path: str, link: float, dilation: float, out_dir: str) -> dict:
    exp = model.load(path, [f"scale.link={link!r}", f"scale.bytes={link * dilation!r}"])
    s = run_experiment(exp, out_dir, log=lambda *_: None)
    busbw = [c["busbw_gbps"] for j in s["jobs"] for c in j["collectives"]]
    cpu = check(s, "cpu")
    return {"busbw_gbps": statistics.mean(busbw), "norm": s["traffic"]["normalized_throughput"],
            "idle_mean": cpu["idle_mean_pct"], "idle_min": cpu["idle_min_pct"],
            "psi_mean": cpu.get("pressure_mean_pct") or 0.0, "psi_max": cpu.get("pressure_max_pct") or 0.0,
            "sat": check(s, "link_saturation").get("busy_utilization_p50") or 0.0,
            "late_p99_ms": 1e3 * (check(s, "lateness").get("p99_s") or 0.0),
            "retrans": s["tcp"].get("retrans_segs", 0), "ok": s["fidelity"]["ok"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--links", default="6.25e-6,1.25e-5,2.5e-5,5e-5", help="scale.link values, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    base = model.load(args.experiment, [])
    dilation = base.scale.dilation
    link_gbps = base.topology.get("link_gbps", 400)
    print(f"{base.name}: dilation {dilation:g} fixed; link {link_gbps} Gb/s real")
    print(f"{'scale.link':>10} {'Mb/s':>6} {'busbw':>7} {'of link':>7} {'norm':>5} {'idle mean':>9} "
          f"{'idle min':>8} {'psi mean':>8} {'psi max':>7} {'sat p50':>7} {'late p99':>8} {'retrans':>7} {'fidelity':>8}")
    with tempfile.TemporaryDirectory(prefix="dtnet-bench-") as tmp:
        for link in (float(x) for x in args.links.split(",")):
            for i in range(args.repeat):
                r = one_run(args.experiment, link, dilation, os.path.join(tmp, f"{link:g}-{i}"))
                print(f"{link:>10.3g} {link_gbps * 1e3 * link:>6.2f} {r['busbw_gbps']:>7.1f} "
                      f"{r['busbw_gbps'] / link_gbps:>7.3f} {r['norm']:>5.3f} {r['idle_mean']:>8.0f}% "
                      f"{r['idle_min']:>7.0f}% {r['psi_mean']:>7.0f}% {r['psi_max']:>6.0f}% {r['sat']:>7.2f} {r['late_p99_ms']:>6.1f}ms {r['retrans']:>7} "
                      f"{'ok' if r['ok'] else 'NOT OK':>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
