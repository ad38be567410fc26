"""How results and fidelity measurements move with `scale` on this machine.

Runs one experiment at several link scales, keeping the time dilation
(bytes / link) fixed, so the same real-cluster workload is emulated with
more or fewer packets per second. If a result does not change while the CPU
idle share drops, CPU idle was not what limited it; where the result starts
to fall, the emulation stopped keeping up. That is the evidence behind the
fidelity thresholds (emulator/run/fidelity.py) and the README's recommended scale.

    sudo .venv/bin/python bench/bench_fidelity_scale.py experiments/ring-fat-tree.yaml \
        --links 6.25e-6,1.25e-5,2.5e-5,5e-5 [--repeat 2] [--out DIR]

--out DIR keeps each run's folder (DIR/link=<scale.link>-<repeat>) and writes
DIR/bench.tsv; the lab check runs it in the VM and on this machine at the same
links (scripts/lab-check.sh, docs/lab-vm.md).
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
from experiment.engine import RunFailure  # noqa: E402

# What a failed run reports: no figures.
FAILED = {"jobs": [], "traffic": {"normalized_throughput": 0.0}, "tcp": {}, "datapath": None,
          "fidelity": {"ok": False, "checks": [{"name": n} for n in ("cpu", "link_saturation", "lateness")]}}


def check(summary: dict, name: str) -> dict:
    return next(c for c in summary["fidelity"]["checks"] if c["name"] == name)


def one_run(path: str, link: float, dilation: float, out_dir: str) -> dict:
    exp = model.load(path, [f"scale.link={link!r}", f"scale.bytes={link * dilation!r}"])
    try:
        s = run_experiment(exp, out_dir, log=lambda *_: None)
    except RunFailure as e:
        print(f"scale.link {link:g}: run failed: {e}", flush=True)
        s = {**FAILED, "status": "failed"}
    colls = [c for j in s["jobs"] for c in j["collectives"]]
    busbw = [c["busbw_gbps"] for c in colls] or [0.0]
    vs_ab = [c["cct_vs_predicted"] for c in colls if c.get("cct_vs_predicted") is not None] or [0.0]
    cpu = check(s, "cpu")
    return {"status": s["status"], "datapath": s.get("datapath") or "?",
            "busbw_gbps": statistics.mean(busbw), "vs_ab": statistics.mean(vs_ab),
            "norm": s["traffic"]["normalized_throughput"],
            "idle_mean": cpu.get("idle_mean_pct") or 0.0, "idle_min": cpu.get("idle_min_pct") or 0.0,
            "psi_mean": cpu.get("pressure_mean_pct") or 0.0, "psi_max": cpu.get("pressure_max_pct") or 0.0,
            "sat": check(s, "link_saturation").get("busy_utilization_p50") or 0.0,
            "late_p99_ms": 1e3 * (check(s, "lateness").get("p99_s") or 0.0),
            "retrans": s["tcp"].get("retrans_segs", 0), "ok": s["fidelity"]["ok"]}


def finish(out_dir: str | None, head: list[str], rows: list[list[str]]) -> int:
    """Write out_dir/bench.tsv (when kept); 0 when every run completed (the last column)."""
    if out_dir:
        with open(os.path.join(out_dir, "bench.tsv"), "w") as f:
            f.writelines("\t".join(r) + "\n" for r in [head, *rows])
    return 0 if all(r[-1] == "complete" for r in rows) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--links", default="6.25e-6,1.25e-5,2.5e-5,5e-5", help="scale.link values, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", help="keep the runs' folders here (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    base = model.load(args.experiment, [])
    dilation = base.scale.dilation
    link_gbps = base.topology.get("link_gbps", 400)
    print(f"{base.name}: dilation {dilation:g} fixed; link {link_gbps} Gb/s real")
    head = ["scale.link", "Mb/s", "datapath", "busbw", "of link", "cct/ab", "norm", "idle mean", "idle min",
            "psi mean", "psi max", "sat p50", "late p99", "retrans", "fidelity", "status"]
    widths = [10, 6, 9, 7, 7, 6, 5, 9, 8, 8, 7, 7, 8, 7, 8, 8]

    def line(cells):
        print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths)), flush=True)
    line(head)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dtnet-bench-") as tmp:
        for link in (float(x) for x in args.links.split(",")):
            for i in range(args.repeat):
                r = one_run(args.experiment, link, dilation, os.path.join(args.out or tmp, f"link={link:g}-{i}"))
                rows.append([f"{link:.3g}", f"{link_gbps * 1e3 * link:.2f}", r["datapath"], f"{r['busbw_gbps']:.1f}",
                             f"{r['busbw_gbps'] / link_gbps:.3f}", f"{r['vs_ab']:.2f}", f"{r['norm']:.3f}",
                             f"{r['idle_mean']:.0f}%", f"{r['idle_min']:.0f}%", f"{r['psi_mean']:.0f}%",
                             f"{r['psi_max']:.0f}%", f"{r['sat']:.2f}", f"{r['late_p99_ms']:.1f}ms",
                             str(r["retrans"]), "ok" if r["ok"] else "NOT OK", r["status"]])
                line(rows[-1])
    return finish(args.out, head, rows)


if __name__ == "__main__":
    sys.exit(main())
