"""Every experiment file on `engine: packet`: accepted or refused, and how each accepted run ended.

    .venv/bin/python bench/bench_packet_all.py [--only SUBSTRING ...] [--wall-s S] [--out DIR]

The issue's acceptance: `dtnet run --engine packet` completes on every file of experiments/ it
accepts, and refuses with one line what it cannot model. Each file runs as a user would run it
(`dtnet check FILE --engine packet` for every file first, which plans and refuses as `run`
does and starts nothing; then `dtnet run FILE --engine packet` on the accepted ones, without
--force, so the hour estimate refuses too), one at a time under /tmp/dtnet-mininet.lock (the machine is shared; an ns-3 run is CPU-bound), with a wall
limit per run. The run folders go under a temporary folder (or --out). Per file it prints:
accepted or refused (the one-line reason), the run's status, its simulated time and wall
seconds. A sweep file runs every point; its status is the sweep's exit.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/dtnet-mininet.lock"


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
           "simulated_s": None}
    if p.returncode != 0:
        row["reason"] = err[-1] if err else f"(exit {p.returncode}, no message)"
        if p.returncode != 2 or len(err) != 1 or "Traceback" in p.stderr:
            row["reason"] += f" [exit {p.returncode}, {len(err)} lines on stderr: not a one-line refusal]"
    return row


def run_one(row: dict, out: str, wall_s: float) -> dict:
    """An accepted file on the packet engine, under the lock: its status, simulated and wall time."""
    cmd = ["flock", "-o", LOCK, "timeout", "--signal=TERM", str(int(wall_s))] + dtnet() + [
        "run", row["file"], "--engine", "packet", "--out", out]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    err = [x for x in p.stderr.splitlines() if x.strip()]
    row.update(rc=p.returncode, wall_s=round(time.monotonic() - t0, 1))
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
    if p.returncode == 124:
        row["status"] = f"hung: killed at the {int(wall_s)} s wall limit"
    elif p.returncode != 0 and not row["status"]:
        row["status"] = f"failed (exit {p.returncode})"
    if "Traceback" in p.stderr:
        row["reason"] = "traceback: " + (err[-1] if err else "")
    return row


def show(r: dict) -> None:
    sim = f"{r['simulated_s']:.4g}" if r["simulated_s"] is not None else ""
    print(f"| {os.path.basename(r['file'])} | {r['verdict']} | {r['status']} | {sim} | {r['wall_s']} | "
          f"{r['reason']} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[], help="files whose name contains one of these")
    ap.add_argument("--wall-s", type=float, default=900, help="wall limit per run (default 900 s)")
    ap.add_argument("--out", default=None, help="folder for the run folders (default: a temporary one)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="packet-all-")
    files = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.yaml")))
    files = [f for f in files if not a.only or any(s in os.path.basename(f) for s in a.only)]
    print(f"run folders under {out}", flush=True)
    print("| file | accepted | status | simulated s | wall s | reason |\n|---|---|---|---|---|---|", flush=True)
    rows = [check_one(f) for f in files]  # every refusal first: they need no lock
    for r in rows:
        if r["verdict"] == "refused":
            show(r)
    for r in rows:
        if r["verdict"] == "accepted":
            show(run_one(r, os.path.join(out, os.path.basename(r["file"])[:-5]), a.wall_s))
    with open(os.path.join(out, "bench_packet_all.json"), "w") as f:
        json.dump(rows, f, indent=1)
    bad = [r for r in rows if r["verdict"] == "accepted" and r["status"] not in ("complete", "sweep complete")]
    print(f"{len(rows)} files: {sum(r['verdict'] == 'refused' for r in rows)} refused, "
          f"{len(rows) - len(bad) - sum(r['verdict'] == 'refused' for r in rows)} complete, {len(bad)} not")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
