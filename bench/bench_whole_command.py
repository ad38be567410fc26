"""Whole `dtnet run` commands on the flow engine, this tree against an older revision, side by side.

    flock -o /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_whole_command.py [--baseline REV]
        [--gpus 16,256,1024,4096] [--pairs 3]

Each point is one ring all-reduce of 256 MiB over N GPUs on one 400 Gb/s switch (engine: flow,
every output written: summary.json, events.jsonl, trace.json, links.csv, plots), run as a whole
process by the same Python, once from REV's files (git archive, default main) and once from
this tree's, in turn (old, new, old, new, ...), so that drift in the machine's load hits both.
Per point it prints the median CPU seconds (user + system of the process, the figure to trust on
a shared machine), the median wall seconds and peak memory of each, their ratio, and whether the
two agree on the simulated CCT and the alpha-beta prediction. ASTRA-sim 2.0's analytical backend
is set beside them where issue 28 measured it on the same collective (a 256-GPU ring: 0.8 s;
4,096 GPUs on one switch: 663 s); it is not run here.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ASTRA_SIM_S = {256: 0.8, 4096: 663.0}  # issue 28: ASTRA-sim 2.0 analytical backend, whole runs

EXPERIMENT = """name: ring-one-switch
engine: flow
topology: {{kind: single-switch, hosts: {gpus}, link_gbps: 400}}
jobs:
  - name: j0
    hosts: all
    workload: {{collective: all_reduce, algorithm: ring, size_bytes: 268435456, iterations: 1, compute_ms: 0}}
"""


def run_once(tree: str, yaml_path: str, out_dir: str) -> dict:
    """One `python -m dtnet run` from tree's files: CPU and wall seconds, peak RSS, and its answers."""
    env = dict(os.environ, PYTHONPATH=tree)
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a chatty run cannot block on it
        proc = subprocess.Popen([sys.executable, "-m", "dtnet", "run", yaml_path, "--out", out_dir, "--force"],
                                cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip()[-300:]
            raise SystemExit(f"bench: {tree}: dtnet run {yaml_path} failed ({proc.returncode}): {tail}")
    with open(os.path.join(out_dir, "summary.json")) as f:
        coll = json.load(f)["jobs"][0]["collectives"][0]
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "rss_mb": usage.ru_maxrss / 1024,
            "cct_s": coll["cct_s"],
            "predicted_cct_s": coll.get("predicted_cct_s")}


def main(argv=None) -> int:
    work = tempfile.mkdtemp(prefix="dtnet-bench-whole-")
    try:
        return bench(work, argv)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the baseline's files and every run's folder


def bench(work: str, argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="main", help="the revision to compare with (default main)")
    ap.add_argument("--gpus", default="16,256,1024,4096", help="GPU counts, comma-separated")
    ap.add_argument("--pairs", type=int, default=3, help="old/new pairs per point (default 3)")
    args = ap.parse_args(argv)
    gpus = [int(x) for x in args.gpus.split(",")]
    old_tree = os.path.join(work, "baseline")
    os.makedirs(old_tree)
    archive = subprocess.run(["git", "-C", ROOT, "archive", args.baseline], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", old_tree], input=archive, check=True)
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", args.baseline], capture_output=True, text=True,
                         check=True).stdout.strip()
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    print(f"ring all-reduce 256 MiB, one 400 Gb/s switch, engine flow, whole `dtnet run`; old = {args.baseline} "
          f"({rev}), new = this tree ({head}); medians of {args.pairs} pairs; load before: {os.getloadavg()[0]:.1f}")
    print(f"{'GPUs':>6} {'old cpu s':>10} {'new cpu s':>10} {'new/old':>8} {'old wall s':>11} {'new wall s':>11} "
          f"{'new MB':>7} {'same answers':>13} {'ASTRA-sim s':>12}")
    for i, n in enumerate(gpus):
        yaml_path = os.path.join(work, f"ring-{n}.yaml")
        with open(yaml_path, "w") as f:
            f.write(EXPERIMENT.format(gpus=n))
        runs = {"old": [], "new": []}
        if i == 0:  # warm-up, not counted: the baseline's files have no compiled bytecode yet
            for tree in (old_tree, ROOT):
                run_once(tree, yaml_path, os.path.join(work, "warm-up"))
        for _ in range(args.pairs):
            for name, tree in (("old", old_tree), ("new", ROOT)):
                runs[name].append(run_once(tree, yaml_path, os.path.join(work, f"out-{name}-{n}")))

        def med(name, key):
            return statistics.median(r[key] for r in runs[name])
        same = all((a["cct_s"], a["predicted_cct_s"]) == (b["cct_s"], b["predicted_cct_s"])
                   for a, b in zip(runs["old"], runs["new"]))
        ratios = [b["cpu_s"] / a["cpu_s"] for a, b in zip(runs["old"], runs["new"])]
        astra = ASTRA_SIM_S.get(n)
        print(f"{n:>6} {med('old', 'cpu_s'):>10.2f} {med('new', 'cpu_s'):>10.2f} {statistics.median(ratios):>8.2f} "
              f"{med('old', 'wall_s'):>11.2f} {med('new', 'wall_s'):>11.2f} {med('new', 'rss_mb'):>7.0f} "
              f"{'yes' if same else 'NO':>13} {astra if astra is not None else '-':>12}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
