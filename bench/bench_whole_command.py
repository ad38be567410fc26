"""Whole `dtnet run` commands on the flow engine, this tree against an older revision, side by side.

    flock -o /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_whole_command.py [--baseline REV]
        [--gpus 16,256,1024,4096] [--pairs 3] [--workload ring|gpt]

Each point is one ring all-reduce of 256 MiB over N GPUs on one 400 Gb/s switch (engine: flow,
every output written: summary.json, events.jsonl, trace.json, links.csv, plots), run as a whole
process by the same Python, once from REV's files (git archive, default main) and once from
this tree's, in turn (old, new, old, new, ...), so that drift in the machine's load hits both.
Per point it prints the median CPU seconds (user + system of the process, the figure to trust on
a shared machine), the median wall seconds and peak memory of each, their ratio, and whether the
two agree on the simulated CCT and the alpha-beta prediction. ASTRA-sim 2.0's analytical backend
is set beside them where issue 28 measured it on the same collective (a 256-GPU ring: 0.8 s;
4,096 GPUs on one switch: 663 s); it is not run here.

`--workload gpt` runs instead one GPT-3 175B iteration (tp 8, pp 8, dp = N / 64, Megatron's batch, H100
compute, ECMP) on the smallest three-tier fat-tree with N hosts, one GPU per host (k=16 at 1,024),
so that tensor parallelism crosses the network: the issue's command at 1,024 GPUs, and how the
whole command grows up to 16,384 (`--gpus 1024,2048,4096,8192,16384`). `--pairs 0` runs this tree
alone, once per point. Each pair also runs this tree with `--no-plots` (the data files alone): its
median wall seconds are the "no plots" column.
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
EXPERIMENT_GPT = """name: gpt3-fat-tree
engine: flow
topology: {{kind: fat-tree, k: {k}, link_gbps: 400}}
controller: {{routing: ecmp}}
jobs:
  - name: gpt
    hosts: {{count: {gpus}}}
    workload: {{model: gpt3-175b, tp: 8, pp: 8, dp: {dp}, iterations: 1, gpu: h100}}
"""


def fat_tree_k(hosts: int) -> int:
    """The smallest even k whose three-tier fat-tree has that many hosts (k^3 / 4)."""
    k = 2
    while k ** 3 // 4 < hosts:
        k += 2
    return k


def run_once(tree: str, yaml_path: str, out_dir: str, *flags: str) -> dict:
    """One `python -m dtnet run` from tree's files: CPU (its children's included) and wall seconds, peak
    RSS, and its answers."""
    env = dict(os.environ, PYTHONPATH=tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's shell: compiled once (the warm-up), then read
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a chatty run cannot block on it
        proc = subprocess.Popen([sys.executable, "-m", "dtnet", "run", yaml_path, "--out", out_dir, "--force", *flags],
                                cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip()[-300:]
            raise SystemExit(f"bench: {tree}: dtnet run {yaml_path} failed ({proc.returncode}): {tail}")
    with open(os.path.join(out_dir, "summary.json")) as f:
        job = json.load(f)["jobs"][0]
    coll = job["collectives"][0]
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "rss_mb": usage.ru_maxrss / 1024,
            "answer": (tuple(job["iteration_time_s"]["all"]), coll["cct_s"], coll.get("predicted_cct_s"))}


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
    ap.add_argument("--pairs", type=int, default=3, help="old/new pairs per point (default 3; 0: this tree once)")
    ap.add_argument("--workload", choices=("ring", "gpt"), default="ring")
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
    what = ("ring all-reduce 256 MiB, one 400 Gb/s switch" if args.workload == "ring" else
            "GPT-3 175B iteration (tp 8, pp 8), fat-tree, one GPU per host")
    print(f"{what}, engine flow, whole `dtnet run`; old = {args.baseline} "
          f"({rev}), new = this tree ({head}); medians of {args.pairs} pairs; load before: {os.getloadavg()[0]:.1f}")
    print(f"{'GPUs':>6} {'old cpu s':>10} {'new cpu s':>10} {'new/old':>8} {'old wall s':>11} {'new wall s':>11} "
          f"{'new MB':>7} {'same answers':>13} {'no plots s':>11} {'ASTRA-sim s':>12}")
    for i, n in enumerate(gpus):
        yaml_path = os.path.join(work, f"ring-{n}.yaml")
        with open(yaml_path, "w") as f:
            f.write(EXPERIMENT.format(gpus=n) if args.workload == "ring" else
                    EXPERIMENT_GPT.format(gpus=n, k=fat_tree_k(n), dp=n // 64))
        runs = {"old": [], "new": [], "bare": []}
        if args.pairs == 0:  # this tree alone
            runs["new"].append(run_once(ROOT, yaml_path, os.path.join(work, f"out-new-{n}")))
        elif i == 0:  # warm-up, not counted: the baseline's files have no compiled bytecode yet
            for tree in (old_tree, ROOT):
                run_once(tree, yaml_path, os.path.join(work, "warm-up"))
        for _ in range(args.pairs):
            for name, tree in (("old", old_tree), ("new", ROOT)):
                runs[name].append(run_once(tree, yaml_path, os.path.join(work, f"out-{name}-{n}")))
            runs["bare"].append(run_once(ROOT, yaml_path, os.path.join(work, f"out-bare-{n}"), "--no-plots"))

        def med(name, key, fmt):
            return format(statistics.median(r[key] for r in runs[name]), fmt) if runs[name] else "-"
        same = all(a["answer"] == b["answer"] for a, b in zip(runs["old"], runs["new"])) if runs["old"] else None
        ratios = [b["cpu_s"] / a["cpu_s"] for a, b in zip(runs["old"], runs["new"])]
        astra = ASTRA_SIM_S.get(n) if args.workload == "ring" else None
        print(f"{n:>6} {med('old', 'cpu_s', '.2f'):>10} {med('new', 'cpu_s', '.2f'):>10} "
              f"{format(statistics.median(ratios), '.2f') if ratios else '-':>8} "
              f"{med('old', 'wall_s', '.2f'):>11} {med('new', 'wall_s', '.2f'):>11} {med('new', 'rss_mb', '.0f'):>7} "
              f"{'-' if same is None else 'yes' if same else 'NO':>13} {med('bare', 'wall_s', '.2f'):>11} "
              f"{astra if astra is not None else '-':>12}",
              flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
