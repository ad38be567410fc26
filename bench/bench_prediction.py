"""What the alpha-beta prediction costs: from its closed form against from the built schedule.

    .venv/bin/python bench/bench_prediction.py [--ranks 1024] [--closed-only-ranks 4096]

Per collective (256 MiB, 400 Gb/s NICs, 3,600 Gb/s NVLink, 8 GPUs per server, 16 KiB slices,
1 us latency) it prints the CPU seconds of traffic.collectives.model.collective_predict_time_s
and of predict_time_s(build_schedule(...)) (what the plan did before), and whether the two
numbers are the same float. Above --ranks only the closed form runs (the schedules grow as N^2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from traffic.collectives import build_schedule, predict_time_s  # noqa: E402
from traffic.collectives.model import collective_predict_time_s  # noqa: E402

POINTS = [("all_reduce", "ring"), ("all_reduce", "direct"), ("all_to_all", "direct"),
          ("all_reduce", "hierarchical"), ("all_gather", "hierarchical")]
SIZE_BYTES = 1 << 28
WHERE = dict(pipeline_slice_bytes=16384, intra_gbps=3600, gpus_per_server=8)


def cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024, help="ranks of the comparison (default 1024)")
    ap.add_argument("--closed-only-ranks", type=int, default=4096, help="ranks of the closed form alone")
    args = ap.parse_args(argv)
    print(f"{'collective':<28} {'ranks':>6} {'closed cpu s':>13} {'schedule cpu s':>15} {'same float':>11}")
    for n, compare in ((args.ranks, True), (args.closed_only_ranks, False)):
        for op, alg in POINTS:
            closed, t_closed = cpu(lambda: collective_predict_time_s(op, alg, n, SIZE_BYTES, 400, 1e-6,
                                                                     schedule_gpus_per_server=8, **WHERE))
            row = f"{op + ' ' + alg:<28} {n:>6} {t_closed:>13.4f}"
            if compare:
                built, t_built = cpu(lambda: predict_time_s(build_schedule(op, alg, n, SIZE_BYTES, gpus_per_server=8),
                                                            400, 1e-6, **WHERE))
                row += f" {t_built:>15.2f} {'yes' if built == closed else 'NO':>11}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
