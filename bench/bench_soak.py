"""Soak: many short runs back to back, some interrupted, in one process.

Each cycle builds a small single-switch testbed, replays a ring all-reduce
and tears it down; every --interrupt-every'th cycle gets a SIGINT mid-replay,
as Ctrl-C would. After each cycle it counts what the run left behind (its
bridges, links, namespaces, switch daemons' directories, processes and
lease: target 0) and samples this process's
open file descriptors, threads and memory, how many ovs-vswitchd processes
are alive (a run's own daemons must be gone) and the shared one's descriptors
and memory, so that a leak shows up as growth over the cycles. Needs root; run it alone (flock).

    sudo .venv/bin/python bench/bench_soak.py [--cycles 50] [--interrupt-every 5] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.run.runner import run_experiment  # noqa: E402
from emulator.testbed import runstate, switchd  # noqa: E402
from experiment import model  # noqa: E402
from experiment.engine import Interrupted, RunFailure  # noqa: E402

EXPERIMENT = {
    "name": "soak",
    "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
    "scale": {"link": 2.5e-5, "bytes": 1.0e-3},
    "controller": {"routing": "ecmp"},
    "jobs": [{"name": "j0", "hosts": "all",
              "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 64 << 20,
                           "iterations": 2, "compute_ms": 0}}],
}
INTERRUPTED_ITERATIONS = 200  # long enough that the SIGINT lands mid-replay


def left_behind(run_dir: str) -> dict:
    """What of this run still exists: bridges, links, live processes, its lease."""
    with open(os.path.join(run_dir, runstate.STATE_NAME)) as f:
        st = json.load(f)
    left = runstate.leftovers(st["tag"])
    pids = list(st["pids"].values()) + list(st.get("host_pids", {}).values())
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    lease = os.path.exists(os.path.join(runstate.LEASE_DIR, f"tag-{st['tag']}"))
    # netns and daemon dirs: a run's own switch daemons (testbed.switch_daemons, auto by default).
    return {"bridges": len(left["bridges"]), "links": len(left["links"]), "netns": len(left["netns"]),
            "daemon_dirs": len(left["daemon_dirs"]), "processes": len(alive), "lease": int(lease)}


def sample() -> dict:
    me = psutil.Process()
    out = {"fds": me.num_fds(), "threads": threading.active_count(), "rss_mb": me.memory_info().rss / 2**20,
           "children": len(me.children(recursive=True))}
    # Every switch daemon alive between cycles (a run's own must all be gone), and the machine's
    # shared one's descriptors and memory.
    out["ovs_daemons"] = sum(p.info["name"] == "ovs-vswitchd" for p in psutil.process_iter(["name"]))
    pid = switchd.shared_vswitchd_pid()
    if pid is not None and psutil.pid_exists(pid):
        shared = psutil.Process(pid)
        out["ovs_fds"] = shared.num_fds()
        out["ovs_rss_mb"] = shared.memory_info().rss / 2**20
    return out


def cycle(i: int, base: str, interrupt: bool) -> dict:
    run_dir = os.path.join(base, f"c{i:03d}")
    exp_data = json.loads(json.dumps(EXPERIMENT))
    if interrupt:
        exp_data["jobs"][0]["workload"]["iterations"] = INTERRUPTED_ITERATIONS
    exp = model.parse(exp_data)
    timer = []

    def log(msg):
        if interrupt and "replaying" in msg:  # SIGINT one second into the replay
            t = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
            t.start()
            timer.append(t)

    t0 = time.monotonic()
    outcome, error = "complete", None
    try:
        summary = run_experiment(exp, run_dir, log=log)
        if summary["status"] != "complete":
            outcome, error = "incomplete", summary["error"]
    except Interrupted:
        outcome = "interrupted"
    except RunFailure as e:
        outcome, error = "failed", str(e)
    finally:
        for t in timer:
            t.cancel()
    took = time.monotonic() - t0
    expected = "interrupted" if interrupt else "complete"
    rec = {"cycle": i, "interrupt": interrupt, "outcome": outcome, "ok": outcome == expected, "error": error,
           "seconds": round(took, 2), "left": left_behind(run_dir), **sample()}
    if rec["ok"] and not any(rec["left"].values()):
        shutil.rmtree(run_dir, ignore_errors=True)  # keep only the folders worth reading
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--interrupt-every", type=int, default=5, help="every Nth cycle is interrupted (0: none)")
    ap.add_argument("--warmup", type=int, default=10, help="cycles before the growth baseline is taken")
    ap.add_argument("--out", default="/tmp/dtnet-soak")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_soak: needs root (Mininet and OVS)", file=sys.stderr)
        return 2

    def on_sigint(_signum, _frame):
        raise Interrupted("SIGINT")

    signal.signal(signal.SIGINT, on_sigint)
    os.makedirs(args.out, exist_ok=True)
    start = sample()
    records = []
    with open(os.path.join(args.out, "soak.jsonl"), "w") as f:
        for i in range(args.cycles):
            interrupt = bool(args.interrupt_every) and (i + 1) % args.interrupt_every == 0
            rec = cycle(i, args.out, interrupt)
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            left = sum(rec["left"].values())
            print(f"cycle {i + 1:>3}/{args.cycles} {'SIGINT ' if interrupt else '       '}{rec['outcome']:<12}"
                  f"{rec['seconds']:>6.1f} s  left {left}  fds {rec['fds']}  threads {rec['threads']}  "
                  f"rss {rec['rss_mb']:.1f} MB  ovs fds {rec.get('ovs_fds')}", flush=True)
    report(records, start, args.warmup)
    return 0 if all(r["ok"] for r in records) and not any(sum(r["left"].values()) for r in records) else 1


def report(records: list[dict], start: dict, warmup: int) -> None:
    base = records[min(warmup, len(records)) - 1] if records else start
    last = records[-1]
    failures = [r for r in records if not r["ok"]]
    left = {k: sum(r["left"][k] for r in records) for k in records[0]["left"]} if records else {}
    print(f"\ncycles: {len(records)} ({sum(r['interrupt'] for r in records)} interrupted by SIGINT); "
          f"failures: {len(failures)}")
    for r in failures:
        print(f"  cycle {r['cycle']}: expected {'interrupted' if r['interrupt'] else 'complete'}, "
              f"got {r['outcome']}: {r['error']}")
    print(f"left behind over all cycles (target 0): {sum(left.values())}  {left}")
    print(f"cycle time: median {statistics.median(r['seconds'] for r in records):.1f} s, "
          f"max {max(r['seconds'] for r in records):.1f} s")
    rows = [("open fds (this process)", "fds", "{:.0f}"), ("threads (this process)", "threads", "{:.0f}"),
            ("child processes", "children", "{:.0f}"), ("RSS MB (this process)", "rss_mb", "{:.1f}"),
            ("ovs-vswitchd processes", "ovs_daemons", "{:.0f}"),
            ("shared ovs-vswitchd fds", "ovs_fds", "{:.0f}"), ("shared ovs-vswitchd RSS MB", "ovs_rss_mb", "{:.1f}")]
    print(f"{'':<26}{'start':>10}{f'after {warmup}':>10}{'last':>10}{'growth':>10}")
    for label, key, fmt in rows:
        if key not in last:
            continue
        vals = [start.get(key), base[key], last[key]]
        print(f"{label:<26}" + "".join(f"{fmt.format(v):>10}" if v is not None else f"{'-':>10}" for v in vals)
              + f"{fmt.format(last[key] - base[key]):>10}")
    steady = records[warmup:]
    if len(steady) >= 3:  # a trend, not two samples of allocator noise
        rss = [r["rss_mb"] for r in steady]
        slope = statistics.linear_regression(range(len(rss)), rss).slope
        print(f"RSS after warm-up: {min(rss):.1f} to {max(rss):.1f} MB, trend {slope * 1000:+.0f} kB per cycle")


if __name__ == "__main__":
    sys.exit(main())
