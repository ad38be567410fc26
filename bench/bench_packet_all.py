"""Every experiment file on `engine: packet`: accepted or refused, and how each accepted run ended.

    .venv/bin/python bench/bench_packet_all.py [--only SUBSTRING ...] [--wall-s S] [--budget-s S]
                                               [--order estimate|name] [--no-lock] [--out DIR]

The issue's acceptance: `dtnet run --engine packet` completes on every file of experiments/ it
accepts, and refuses with one line what it cannot model. Each file runs as a user would run it
(`dtnet check FILE --engine packet` for every file first, which plans and refuses as `run`
does and starts nothing; then `dtnet run FILE --engine packet` on the accepted ones, without
--force, so the hour estimate refuses too), one at a time under /tmp/dtnet-mininet.lock (the
machine is shared; an ns-3 run is CPU-bound), with a wall limit per run. The wall column starts
once the lock is held (waiting for it is not the run's time); CPU seconds are the run's and its
driver's (the figure to read on a loaded machine); the load average is taken at each run's start
and end. --no-lock runs without the lock (every figure is simulated time or CPU seconds).

The engine's own estimate (`estimated S s` in the run's log: packets x hops at
packetsim.runner.EVENTS_PER_S; a sweep sums its points) is printed beside the wall and CPU
seconds, so a run that outlasts the limit shows how far off the estimate was. --order estimate
(the default) runs the cheapest files first; --budget-s stops starting runs once that much wall
time is spent, and lists the rest as not run, with their estimates (a file whose planning takes
longer than --plan-limit-s gets no estimate and runs last). The run folders go under a
temporary folder (or --out), with bench_packet_all.json.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench_transport import machine_lock  # noqa: E402  (the same lock, taken the same way)

ESTIMATE = re.compile(r"\[packet\] .*; estimated ([0-9.e+]+) s")
SIMULATED = re.compile(r"\[packet\] ([0-9.e+]+) ms simulated")


def dtnet() -> list[str]:
    exe = os.path.join(ROOT, ".venv", "bin", "dtnet")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "dtnet.cli"]


def check_one(path: str) -> dict:
    """`dtnet check FILE --engine packet`, without the lock: it plans and refuses as `run` does and
    starts nothing. A row with verdict accepted or refused (the one-line reason)."""
    t0 = time.monotonic()
    p = subprocess.run(dtnet() + ["check", path, "--engine", "packet"], capture_output=True, text=True, cwd=ROOT)
    err = [x for x in p.stderr.splitlines() if x.strip()]
    row = {"file": os.path.relpath(path, ROOT), "rc": p.returncode, "wall_s": round(time.monotonic() - t0, 1),
           "verdict": "accepted" if p.returncode == 0 else "refused", "reason": "", "status": "",
           "simulated_s": None, "cpu_s": None, "estimate_s": None, "load": ""}
    if p.returncode != 0:
        row["reason"] = err[-1] if err else f"(exit {p.returncode}, no message)"
        if p.returncode != 2 or len(err) != 1 or "Traceback" in p.stderr:
            row["reason"] += f" [exit {p.returncode}, {len(err)} lines on stderr: not a one-line refusal]"
    return row


def estimate_s(path: str, plan_limit_s: float) -> float | None:
    """The packet engine's own estimate of FILE's run (every point of a sweep, summed), planned as
    `dtnet run` plans it, in a child process; None if planning fails (the run will say why) or
    takes longer than plan_limit_s (the 1,024-GPU files plan for minutes in GBs)."""
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--estimate", path], capture_output=True,
                           text=True, cwd=ROOT, timeout=plan_limit_s)
    except subprocess.TimeoutExpired:
        return None
    return float(p.stdout.split()[-1]) if p.returncode == 0 and p.stdout.split() else None


def print_estimate(path: str) -> int:
    """The child of estimate_s: print the estimate in seconds."""
    import dtnet as api
    from packetsim import runner

    try:
        exp = api.load(os.path.join(ROOT, path)).set("engine", "packet")
        with contextlib.redirect_stdout(io.StringIO()):
            total, _ = runner.estimate_sweep_s([x.model for x in [p.experiment for p in exp.points()] or [exp]])
        print(total)
        return 0
    except Exception:  # noqa: BLE001 - the run itself reports what is wrong with the file
        return 1


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(row: dict, out: str, wall_s: float, lock: bool) -> dict:
    """An accepted file on the packet engine: its status, simulated, wall and CPU seconds."""
    cmd = ["timeout", "--signal=TERM", "--kill-after=30", str(int(wall_s))] + dtnet() + [
        "run", row["file"], "--engine", "packet", "--out", out]
    with machine_lock(lock):  # the clock starts once the lock is held
        load0, cpu0, t0 = os.getloadavg()[0], children_cpu_s(), time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        row.update(rc=p.returncode, wall_s=round(time.monotonic() - t0, 1), cpu_s=round(children_cpu_s() - cpu0, 1),
                   load=f"{load0:.1f}-{os.getloadavg()[0]:.1f}")
    logged = p.stdout + p.stderr
    estimates = [float(x) for x in ESTIMATE.findall(logged)]
    if estimates and row["estimate_s"] is None:  # a sweep cut short logs only the points it started
        row["estimate_s"] = round(sum(estimates), 1)
    err = [x for x in p.stderr.splitlines() if x.strip()]
    if p.returncode == 2:  # refused by run although check accepted it
        row.update(verdict="refused by run", reason=err[-1] if err else "(no message)")
        return row
    summary = os.path.join(out, "summary.json")
    if os.path.exists(summary):
        with open(summary) as f:
            s = json.load(f)
        row["status"] = s.get("status") or ""
        row["simulated_s"] = (s.get("model") or {}).get("simulated_s")
        if s.get("error"):
            row["reason"] = str(s["error"])[:160]
    elif os.path.exists(os.path.join(out, "sweep.csv")):
        row["status"] = "sweep complete" if p.returncode == 0 else f"sweep failed (exit {p.returncode})"
    if p.returncode in (124, 137):
        sims = SIMULATED.findall(logged)
        row["status"] = f"killed at the {int(wall_s)} s wall limit" + (
            f" ({float(sims[-1]):.4g} ms simulated by then)" if sims else "")
    elif p.returncode != 0 and not row["status"]:
        row["status"] = f"failed (exit {p.returncode})"
    if "Traceback" in p.stderr:
        row["reason"] = "traceback: " + (err[-1] if err else "")
    return row


def show(r: dict) -> None:
    num = lambda v, f="{:.4g}": f.format(v) if v is not None else ""  # noqa: E731
    print(f"| {os.path.basename(r['file'])} | {r['verdict']} | {r['status']} | {num(r['simulated_s'])} | "
          f"{num(r['estimate_s'], '{:.0f}')} | {r['wall_s'] if r['cpu_s'] is not None else ''} | {num(r['cpu_s'], '{:.0f}')} | "
          f"{r['load']} | {r['reason']} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[], help="files whose name contains one of these")
    ap.add_argument("--wall-s", type=float, default=900, help="wall limit per run (default 900 s)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no run once this many wall seconds of runs are spent (default: no budget)")
    ap.add_argument("--order", choices=("estimate", "name"), default="estimate",
                    help="run the files by the engine's estimate, cheapest first (default), or by name")
    ap.add_argument("--no-lock", action="store_true", help="run without the machine lock (the load is recorded)")
    ap.add_argument("--plan-limit-s", type=float, default=60,
                    help="wall seconds to plan a file for its estimate; longer: run last (default 60)")
    ap.add_argument("--out", default=None, help="folder for the run folders (default: a temporary one)")
    ap.add_argument("--estimate", metavar="FILE", help=argparse.SUPPRESS)  # the child of estimate_s
    a = ap.parse_args()
    if a.estimate:
        return print_estimate(a.estimate)
    out = a.out or tempfile.mkdtemp(prefix="packet-all-")
    os.makedirs(out, exist_ok=True)
    files = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.yaml")))
    files = [f for f in files if not a.only or any(s in os.path.basename(f) for s in a.only)]
    print(f"run folders under {out}", flush=True)
    print("| file | accepted | status | simulated s | estimate s | wall s | CPU s | load | reason |\n"
          "|---|---|---|---|---|---|---|---|---|", flush=True)
    rows = [check_one(f) for f in files]  # every refusal first: they need no lock
    for r in rows:
        if r["verdict"] == "refused":
            show(r)
    accepted = [r for r in rows if r["verdict"] == "accepted"]
    for r in accepted:
        r["estimate_s"] = estimate_s(r["file"], a.plan_limit_s)
    if a.order == "estimate":
        accepted.sort(key=lambda r: (r["estimate_s"] is None, r["estimate_s"] or 0))
    spent = 0.0
    for r in accepted:
        if a.budget_s is not None and spent >= a.budget_s:
            r["status"], r["wall_s"] = "not run (bench budget spent)", None
            show(r)
            continue
        show(run_one(r, os.path.join(out, os.path.basename(r["file"])[:-5]), a.wall_s, not a.no_lock))
        spent += r["wall_s"] or 0
        with open(os.path.join(out, "bench_packet_all.json"), "w") as f:  # kept as it goes
            json.dump(rows, f, indent=1)
    with open(os.path.join(out, "bench_packet_all.json"), "w") as f:
        json.dump(rows, f, indent=1)
    done = ("complete", "sweep complete")
    bad = [r for r in accepted if r["status"] not in done and not r["status"].startswith("not run")]
    skipped = [r for r in accepted if r["status"].startswith("not run")]
    print(f"{len(rows)} files: {len(rows) - len(accepted)} refused, {sum(r['status'] in done for r in accepted)} "
          f"complete, {len(bad)} not, {len(skipped)} not run")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
