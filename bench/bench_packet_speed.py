"""The packet engine's speed: the ns-3 driver's CPU seconds per scenario, and old against new.

    .venv/bin/python bench/bench_packet_speed.py write DIR [--hosts 8 16 ...] [--mib 32 256]
                                                       [--fat-tree K] [--size-mib S]
    .venv/bin/python bench/bench_packet_speed.py run DIR BINARY [BINARY ...] [--rounds N] [--outputs OUT]
    .venv/bin/python bench/bench_packet_speed.py diff OUT_A.txt OUT_B.txt
    .venv/bin/python bench/bench_packet_speed.py plan [--ranks 64 256 1024]

`write` plans ring all-reduces on one 400 Gb/s switch (experiments/ring-single-switch.yaml,
one iteration, every GPU count x size) and on a k-ary fat-tree (ring-fat-tree.yaml), and
writes each as the driver's scenario file, as `dtnet run --engine packet` would.
`run` runs every scenario under each driver binary in turn (alternating, N rounds, so that a
change of machine load hits both alike) and prints per run the events, the driver's CPU
seconds (user + system), wall seconds, the last task's end (the CCT in simulated seconds) and
the ratio of each binary's CCT to the first's; with --outputs, each run's output lines go to
OUT/SCENARIO.BINARY.txt (the last round's). `diff` says whether two such outputs are the same
line for line (without the meta and progress lines) and, where they are not, by how much: the
CCT, the largest shift of a task's end, and per queue statistic the largest relative change.
`plan` times packetsim.runner.plan for a ring
over N ranks on one switch. Run the heavy ones under the shared machine lock.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

MIB = 1 << 20


def _exp(name: str, sets: list[str]):
    from experiment.model import load

    return load(os.path.join(ROOT, "experiments", f"{name}.yaml"), sets)


def ring_sets(hosts: int | None, size_bytes: int) -> list[str]:
    sets = [f"jobs.0.workload.size_bytes={size_bytes}", "jobs.0.workload.iterations=1"]
    return sets + ([f"topology.hosts={hosts}"] if hosts else [])


def write_scenarios(out_dir: str, hosts: list[int], mibs: list[int], fat_tree_k: int, fat_tree_mib: int) -> None:
    from packetsim import runner, scenario

    os.makedirs(out_dir, exist_ok=True)
    points = [(f"ring-single-{n}gpu-{m}mib", "ring-single-switch", ring_sets(n, m * MIB))
              for m in mibs for n in hosts]
    if fat_tree_k:
        points.append((f"ring-fat-tree-k{fat_tree_k}-{fat_tree_mib}mib", "ring-fat-tree",
                       ring_sets(None, fat_tree_mib * MIB) + [f"topology.k={fat_tree_k}"]))
    for name, src, sets in points:
        exp = _exp(src, sets)
        _, _, net, sc, t, loop = runner.plan(exp, log=lambda *_: None)
        assert loop is None, "a static routing policy: the scenario runs without a controller"
        path = os.path.join(out_dir, name + ".txt")
        scenario.write(sc, net, t, path, seed=exp.flow.ecmp_seed + 1, bin_s=sc.bin_s or runner.bin_s(sc, net),
                       end_s=runner.END_S, rto_min_s=runner.RTO_MIN_S)
        print(f"{path}: {len(sc.conns)} connections, {sc.payload_bytes / MIB:.4g} MiB of payload")


def run_one(binary: str, path: str, outputs: str | None = None) -> dict:
    """One driver run: its events, CPU and wall seconds, and the last task's end (simulated s);
    its output lines kept in outputs/SCENARIO.BINARY.txt when outputs is a folder."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run([binary, path], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{binary} {path}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    if outputs:
        os.makedirs(outputs, exist_ok=True)
        name = f"{os.path.splitext(os.path.basename(path))[0]}.{os.path.basename(binary)}.txt"
        with open(os.path.join(outputs, name), "w") as f:
            f.write(p.stdout)
    meta, end, retx = None, 0.0, 0
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec["type"] == "meta":
            meta = rec
        elif rec["type"] == "task":
            end = max(end, rec["end"])
        elif rec["type"] == "conn":
            retx += rec["retx"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"events": meta["events"], "cpu_s": cpu, "wall_s": wall, "cct_s": end, "retx": retx,
            "peak_mb": after.ru_maxrss / 1024}


def run_all(out_dir: str, binaries: list[str], rounds: int, outputs: str | None = None) -> None:
    paths = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.endswith(".txt"))
    print(f"load {os.getloadavg()[0]:.2f}")
    for path in paths:
        for r in range(rounds):
            first = None
            for b in binaries:
                m = run_one(b, path, outputs)
                first = first or m
                print(f"{os.path.basename(path)} round {r} {os.path.basename(b)}: {m['events']:,} events, "
                      f"{m['cpu_s']:.2f} CPU s, {m['wall_s']:.2f} wall s, cct {m['cct_s'] * 1e3:.6g} ms "
                      f"(x{m['cct_s'] / first['cct_s']:.5f}), {m['retx']} retx, "
                      f"{m['events'] / max(m['cpu_s'], 1e-9) / 1e3:,.0f} k events/CPU s", flush=True)


def _records(path: str) -> dict:
    recs: dict = {"task": [], "queue": [], "lines": []}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue  # progress
            rec = json.loads(line)
            if rec["type"] != "meta":
                recs["lines"].append(line)
            if rec["type"] in recs:
                recs[rec["type"]].append(rec)
    return recs


def diff_outputs(path_a: str, path_b: str) -> None:
    a, b = _records(path_a), _records(path_b)
    if a["lines"] == b["lines"]:
        print(f"same: {len(a['lines'])} output lines alike")
        return
    cct_a, cct_b = (max(t["end"] for t in r["task"]) for r in (a, b))
    shift = max(abs(x["end"] - y["end"]) for x, y in zip(a["task"], b["task"]))
    print(f"differ: CCT {cct_a * 1e3:.6g} -> {cct_b * 1e3:.6g} ms (x{cct_b / cct_a:.6f}), "
          f"largest shift of a task's end {shift * 1e9:.0f} ns")
    for key in ("mean", "p99", "max", "drops"):
        pairs = [(x[key], y[key]) for x, y in zip(a["queue"], b["queue"]) if x[key] != y[key]]
        worst = max(pairs, key=lambda p: abs(p[1] - p[0]) / max(abs(p[0]), 1e-12), default=None)
        print(f"  queue {key}: {len(pairs)} of {len(a['queue'])} ports changed"
              + (f", the most {worst[0]:.6g} -> {worst[1]:.6g} ({(worst[1] - worst[0]) / max(abs(worst[0]), 1e-12):+.3%})"
                 if worst else ""))


def time_plan(ranks: list[int]) -> None:
    from packetsim import runner

    for n in ranks:
        exp = _exp("ring-single-switch", ring_sets(n, 256 * MIB))
        t = time.process_time()
        _, _, _, sc, _, _ = runner.plan(exp, log=lambda *_: None)
        print(f"plan() for {n} ranks: {time.process_time() - t:.2f} CPU s, {len(sc.kinds):,} tasks, "
              f"{len(sc.conns):,} connections", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--hosts", type=int, nargs="*", default=[8, 16, 32, 64, 128])
    w.add_argument("--mib", type=int, nargs="*", default=[32, 256])
    w.add_argument("--fat-tree", type=int, default=0, help="also a ring on a k-ary fat-tree (0: none)")
    w.add_argument("--size-mib", type=int, default=256, help="the fat-tree ring's size")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("binaries", nargs="+")
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--outputs", help="keep each run's output lines in this folder")
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    p = sub.add_parser("plan")
    p.add_argument("--ranks", type=int, nargs="*", default=[64, 256, 1024])
    a = ap.parse_args()
    if a.cmd == "write":
        write_scenarios(a.dir, a.hosts, a.mib, a.fat_tree, a.size_mib)
    elif a.cmd == "run":
        run_all(a.dir, a.binaries, a.rounds, a.outputs)
    elif a.cmd == "diff":
        diff_outputs(a.a, a.b)
    else:
        time_plan(a.ranks)


if __name__ == "__main__":
    main()
