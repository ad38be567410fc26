"""How long this machine takes to wake N sleeping Python processes at one instant.

Every rank of an emulator run sleeps until its job's go and then starts its first op, all at the
same instant; the lateness check (docs/fidelity.md) counts how late each start was. This measures
the floor under that: N processes that do nothing but sleep until a shared instant and read the
clock, each one `time.sleep` (mode sleep) or `threading.Condition.wait` with a timeout, as the
agents wait (mode condition). Prints, per N, the median and the largest lateness over --repeat
rounds (each round's own median and maximum, then their medians).

    .venv/bin/python bench/bench_wake.py [--procs 16,32,64] [--repeat 5]

No root, no network; it uses the CPU for a few milliseconds a round, so run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

LEAD_S = 0.5  # the shared instant is this far ahead of the last fork


def _wait_until(t0: float, mode: str) -> float:
    if mode == "sleep":
        while (now := time.time()) < t0:
            time.sleep(t0 - now)
    else:
        cond = threading.Condition()
        with cond:
            while (now := time.time()) < t0:
                cond.wait(t0 - now)
    return time.time() - t0


def round_lateness(n: int, mode: str) -> list[float]:
    """Lateness (s) of each of n forked processes waking at one instant."""
    r, w = os.pipe()
    t0 = time.time() + LEAD_S + 0.002 * n
    pids = []
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:  # the child: wait, report, leave at once
                try:
                    os.close(r)
                    os.write(w, f"{_wait_until(t0, mode):.7f}\n".encode())
                finally:
                    os._exit(0)
            pids.append(pid)
    finally:
        os.close(w)
        for pid in pids:  # only the children this round started
            os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        return sorted(float(x) for x in f.read().split())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", default="16,32,64", help="comma-separated process counts")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per count and mode")
    ap.add_argument("--modes", default="sleep,condition", help="sleep, condition or both")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.procs.split(",")]
        modes = args.modes.split(",")
        if any(c < 1 or c > 1024 for c in counts) or any(m not in ("sleep", "condition") for m in modes) \
                or args.repeat < 1:
            raise ValueError
    except ValueError:
        print(f"bench_wake.py: --procs: expected counts in 1..1024, --modes: sleep or condition, --repeat >= 1; "
              f"found {args.procs!r}, {args.modes!r}, {args.repeat}", file=sys.stderr)
        return 2
    print(f"cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}; {args.repeat} rounds each; "
          "lateness after the shared instant, ms (median of the rounds' medians, median of their maxima)")
    print(f"{'procs':>6} {'mode':>10} {'median':>8} {'max':>8}")
    for n in counts:
        for mode in modes:
            rounds = [round_lateness(n, mode) for _ in range(args.repeat)]
            med = statistics.median(x[len(x) // 2] for x in rounds)
            mx = statistics.median(x[-1] for x in rounds)
            print(f"{n:>6} {mode:>10} {med * 1e3:>8.2f} {mx * 1e3:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
