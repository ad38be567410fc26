"""A gloo all-reduce loop, the real-program counterpart of `workload: {collective: all_reduce}`.

Started by dtnet on every host of a job (examples/gloo-allreduce.yaml) with torchrun's
environment, or by hand with torchrun. Each iteration all-reduces one float32 tensor per
size; every result is checked exactly (small integers sum exactly in float32), and a wrong
one ends the program with status 1. Each all-reduce and each iteration is reported to dtnet
with dtnet.program's marker lines. With DTNET_PROFILE_DIR set (workload.profile: true) the
timed iterations run under torch.profiler and write Kineto and execution traces there.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

from dtnet import program


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-bytes", type=int, nargs="+", default=[1 << 20],
                    help="all-reduce sizes, bytes (multiples of 4: float32 tensors)")
    ap.add_argument("--iterations", type=int, default=5, help="timed iterations (one all-reduce per size)")
    ap.add_argument("--warmup", type=int, default=1, help="iterations before timing (connections, buffers)")
    return ap.parse_args(argv)


def expected(n_elems: int, world: int, it: int) -> torch.Tensor:
    """Rank r contributes (i % 7) + r + it at index i; the sum over ranks is exact in float32."""
    base = torch.arange(n_elems, dtype=torch.int64) % 7 + it
    return (base * world + world * (world - 1) // 2).to(torch.float32)


def main(argv=None) -> int:
    args = parse_args(argv)
    for s in args.sizes_bytes:
        if s <= 0 or s % 4:
            print(f"gloo_allreduce: --sizes-bytes: expected positive multiples of 4, found {s}", file=sys.stderr)
            return 2
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    tensors = {s: torch.empty(s // 4, dtype=torch.float32) for s in args.sizes_bytes}
    bad = 0

    def one_iteration(it: int, timed: bool) -> int:
        errors = 0
        t_it = time.time()
        for s, t in tensors.items():
            t.copy_(torch.arange(t.numel(), dtype=torch.int64) % 7 + rank + it)
            t0 = time.time()
            dist.all_reduce(t)
            t1 = time.time()
            if timed:
                program.report_collective("all_reduce", s, t0, t1, iteration=it)
            want = expected(t.numel(), world, it)
            if not torch.equal(t, want):
                errors += 1
                print(f"rank {rank}: all_reduce of {s} bytes, iteration {it}: wrong result "
                      f"(first values {t[:4].tolist()}, expected {want[:4].tolist()})", file=sys.stderr)
        if timed:  # the refills and checks count too: they are this program's compute
            program.report_iteration(it, time.time() - t_it)
        return errors

    dist.barrier()
    for it in range(args.warmup):
        bad += one_iteration(it, timed=False)
    prof_dir = program.profile_dir()
    timed = range(args.warmup, args.warmup + args.iterations)
    if prof_dir:
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
        et = ExecutionTraceObserver().register_callback(os.path.join(prof_dir, f"et-rank{rank}.json"))
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et) as p:
            for it in timed:
                bad += one_iteration(it, timed=True)
                p.step()
        p.export_chrome_trace(os.path.join(prof_dir, f"kineto-rank{rank}.json"))
        et.unregister_callback()
    else:
        for it in timed:
            bad += one_iteration(it, timed=True)
    # Every rank learns whether any rank saw a wrong result, so that all exit alike.
    flag = torch.tensor([bad], dtype=torch.int64)
    dist.all_reduce(flag)
    dist.destroy_process_group()
    if flag.item():
        print(f"rank {rank}: {flag.item()} wrong all-reduce results over all ranks", file=sys.stderr)
        return 1
    print(f"rank {rank}: {len(tensors)} sizes x {args.iterations} iterations, every result checked", flush=True)
    return 0


if __name__ == "__main__":
    program.exit(main())  # not sys.exit: torch's threads may abort the interpreter's finalization
