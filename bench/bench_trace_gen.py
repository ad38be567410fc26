"""The whole `dtnet trace` commands as a user runs them, as the GPU count grows.

Run: flock /tmp/dtnet-mininet.lock python bench/bench_trace_gen.py [--repeat 3] [--old DIR]

Each figure is one subprocess: `dtnet trace generate ...`, `dtnet trace show ...` and
`dtnet trace import aicb ...`, its wall time (the median of --repeat runs) and its own peak RSS
(os.wait4's rusage of that child, the largest of the runs). Cases:
- GPT-3 175B, tp 8, pp 8, with the published global batch (1,536 sequences): 1,024 GPUs (dp 16,
  96 micro-batches, the issue's command) and 16,384 (dp 256, 6 micro-batches);
- the same with 8 micro-batches per replica (the work per GPU fixed), 1,024 to 131,072 GPUs: how
  time, memory and file size grow with the GPU count;
- SimAI's 9,216-GPU example workload (tests/data/aicb/, Apache-2.0): import, then show.
With --old DIR (a checkout of the code before rank classes, e.g. `git worktree add /tmp/old
1f46daa`), the 1,024-GPU published-batch generate and show also run on the old code, side by side;
the old show is bounded by --old-timeout and an address-space limit (it needed 4.3 GB), and the
old AICB import is not run (the kernel killed it at 24 GB).
Targets (issue 14): 1,024 GPUs generate < 2 s and < 500 MB; 16,384 < 3 s; 131,072 < 10 s;
show < 3 s each; the AICB import and show < 10 s and < 1 GB.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
AICB = os.path.join(ROOT, "tests", "data", "aicb", "simai-workload_analytical.txt")
GPT3 = ["--model", "gpt3-175b", "--tp", "8", "--pp", "8"]
# The CLI entry of the new code and of an older checkout (before the house move it was emulator.cli).
LAUNCH = ("import sys; sys.path.insert(0, {root!r})\n"
          "try:\n    from dtnet.cli import main\n"
          "except ImportError:\n    from emulator.cli import main\n"
          "sys.exit(main(sys.argv[1:]))")


def run(root, argv, timeout_s=None, max_bytes=None):
    """(wall seconds, peak RSS MiB, exit status) of `dtnet ARGV` from the code at `root`."""
    def limit():
        if max_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", LAUNCH.format(root=root), *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, preexec_fn=limit, cwd=tempfile.gettempdir())
    deadline = None if timeout_s is None else t0 + timeout_s
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if deadline and time.perf_counter() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            return time.perf_counter() - t0, usage.ru_maxrss / 1024, "timeout"
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace").strip()
    code = p.returncode if not err or p.returncode == 0 else f"{p.returncode}: {err.splitlines()[-1][:80]}"
    return wall, usage.ru_maxrss / 1024, code  # ru_maxrss is in KiB on Linux


def measure(root, argv, repeat, **kw):
    rows = [run(root, argv, **kw) for _ in range(repeat)]
    codes = {r[2] for r in rows}
    return statistics.median(r[0] for r in rows), max(r[1] for r in rows), codes.pop() if len(codes) == 1 else codes


def fmt(row, target_s=None, target_mib=None):
    wall, mib, code = row
    verdict = []
    if target_s is not None:
        verdict.append(f"{'meets' if wall < target_s else 'MISSES'} < {target_s:g} s")
    if target_mib is not None:
        verdict.append(f"{'meets' if mib < target_mib else 'MISSES'} < {target_mib:g} MB")
    status = "" if code == 0 else f"  [exit {code}]"
    return f"{wall:8.2f} s {mib:8.0f} MiB  {'; '.join(verdict)}{status}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per command; the median wall time is shown")
    ap.add_argument("--gpus", type=int, nargs="+", default=[1024, 4096, 16384, 65536, 131072],
                    help="GPU counts of the fixed-micro-batch sweep")
    ap.add_argument("--old", help="a checkout of the old code to run side by side (1,024 GPUs)")
    ap.add_argument("--old-timeout", type=float, default=900.0, help="seconds the old show may take")
    ap.add_argument("--old-max-gb", type=float, default=8.0, help="address space the old commands may use")
    ap.add_argument("--keep", action="store_true", help="keep the trace files (else removed at the end)")
    args = ap.parse_args(argv)
    out = tempfile.mkdtemp(prefix="bench-trace-")
    try:
        bench(args, out)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)


def bench(args, out):
    r = args.repeat
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]} repeat={r} (median wall, largest peak RSS)")
    print(f"whole commands: python -m dtnet.cli trace ...; files in {out}{' (kept)' if args.keep else ''}\n")

    print("GPT-3 175B, tp 8, pp 8, published global batch 1536")
    published = {}
    for gpus, target in ((1024, 2.0), (16384, 3.0)):
        path = os.path.join(out, f"gpt3-{gpus}.json")
        gen = measure(ROOT, ["trace", "generate", *GPT3, "--gpus", str(gpus), "--out", path], r)
        show = measure(ROOT, ["trace", "show", path], r)
        published[gpus] = (gen, show, path)
        print(f"  {gpus:>7} GPUs generate {fmt(gen, target, 500 if gpus == 1024 else None)}   "
              f"file {os.path.getsize(path) / 2**20:6.1f} MiB")
        print(f"  {gpus:>7} GPUs show     {fmt(show, 3.0)}")

    print("\nGPT-3 175B, tp 8, pp 8, 8 micro-batches per replica (work per GPU fixed)")
    print(f"  {'gpus':>7} {'generate':>30} {'show':>30} {'file MiB':>9}  growth vs the first row")
    first = None
    for gpus in args.gpus:
        path = os.path.join(out, f"gpt3-mb8-{gpus}.json")
        gen = measure(ROOT, ["trace", "generate", *GPT3, "--gpus", str(gpus), "--microbatches", "8",
                             "--out", path], r)
        show = measure(ROOT, ["trace", "show", path], r)
        size = os.path.getsize(path) / 2**20
        first = first or (gpus, gen, show, size)
        target = 10.0 if gpus == 131072 else None
        growth = ""
        if gpus != first[0]:
            k = math.log(gpus / first[0])
            growth = (f"x{gpus // first[0]} GPUs: generate time x{gen[0] / first[1][0]:.2f}, memory "
                      f"x{gen[1] / first[1][1]:.2f}; show time x{show[0] / first[2][0]:.2f} "
                      f"(time ~ GPUs^{math.log(max(show[0], 1e-9) / first[2][0]) / k:.2f})")
        print(f"  {gpus:>7} {fmt(gen, target):>30} {fmt(show, 3.0 if gpus == 131072 else None):>30} "
              f"{size:9.2f}  {growth}")

    print("\nSimAI example workload, 9,216 GPUs (tp 2, pp 12, ep 16, vpp 8, ga 24)")
    path = os.path.join(out, "simai.json")
    imp = measure(ROOT, ["trace", "import", "aicb", AICB, "--out", path], r)
    show = measure(ROOT, ["trace", "show", path], r)
    print(f"  import {fmt(imp, 10.0, 1024)}   file {os.path.getsize(path) / 2**20:.1f} MiB")
    print(f"  show   {fmt(show, 10.0, 1024)}")

    if args.old:
        old_root = os.path.abspath(args.old)
        limit = int(args.old_max_gb * 2**30)
        path = os.path.join(out, "gpt3-1024-old.json")
        print(f"\nSide by side at 1,024 GPUs (published batch), old code at {old_root}, one run each")
        gen = run(old_root, ["trace", "generate", *GPT3, "--gpus", "1024", "--out", path], max_bytes=limit)
        new_gen, new_show, _ = published[1024]
        print(f"  generate  old {fmt(gen)}   new {fmt(new_gen)}   old/new time x{gen[0] / new_gen[0]:.1f}, "
              f"memory x{gen[1] / new_gen[1]:.1f}")
        if os.path.exists(path):
            print(f"  old file {os.path.getsize(path) / 2**20:.0f} MiB")
            show = run(old_root, ["trace", "show", path], timeout_s=args.old_timeout, max_bytes=limit)
            print(f"  show      old {fmt(show)}   new {fmt(new_show)}   old/new time x{show[0] / new_show[0]:.1f}, "
                  f"memory x{show[1] / new_show[1]:.1f}")
            both = run(ROOT, ["trace", "show", path], timeout_s=args.old_timeout, max_bytes=limit)
            print(f"  the old file (version 1: one class per rank) shown by the new code: {fmt(both)}")
        print("  old AICB import of the SimAI example: not run (issue 14: killed by the kernel at 24 GB)")


if __name__ == "__main__":
    main()
