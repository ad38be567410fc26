"""Records the PyTorch traces under tests/data/torch/: real torch.distributed jobs, 4 ranks of
gloo on loopback (torch.multiprocessing, MASTER_ADDR=127.0.0.1), each rank writing its
torch.profiler (Kineto) trace and its ExecutionTraceObserver trace, gzipped.

Run:  .venv/bin/pip install torch==2.13.0   (the CPU build on local disk; no other version)
      .venv/bin/python scripts/record-torch-traces.py [--out tests/data/torch]

Two jobs; what they do is written here, and tests/unit/traffic/test_traffic_torch_traces.py checks
the imports against it:

ddp     An MLP (Linear 256->512, ReLU, Linear 512->256) under DistributedDataParallel with
        bucket_cap_mb=0.25, batch 512. Two iterations run unprofiled (DDP rebuilds its
        buckets after the first and broadcasts the new layout in the second), then two are
        profiled. Each profiled iteration all-reduces two buckets on the world group, in this
        order: bucket 0 = layer 2's weight and bias (131,328 floats, 525,312 bytes), launched
        during backward while layer 1's gradients are still being computed; bucket 1 =
        layer 1's (131,584 floats, 526,336 bytes). The optimizer step waits for both.
two-pg  Two process groups per rank besides the world: tensor-parallel pairs tp = [0,1], [2,3]
        (created first: pg names 1, 2) and data-parallel pairs dp = [0,2], [1,3] (pg 3, 4).
        Each of two profiled iterations: a matmul, a synchronous tp all-reduce of the
        activation (64 x 128 floats, 32,768 bytes), another matmul, an asynchronous dp
        all-reduce of a gradient (128 x 128 floats, 65,536 bytes) overlapped with a third,
        larger matmul, then wait() and an update. No collective on the world group.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile

WORLD = 4
JOBS = ("ddp", "two-pg")


def _ddp(rank, dist, torch, profiled):
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(512, 256)

    def step():
        opt.zero_grad()
        ddp(x).sum().backward()
        opt.step()
    for _ in range(2):  # bucket rebuild happens here, unprofiled
        step()
    profiled(step)


def _two_pg(rank, dist, torch, profiled):
    tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    w1, w2, w3 = torch.randn(128, 128), torch.randn(128, 128), torch.randn(512, 512)

    def step():
        h = torch.randn(64, 128) @ w1
        dist.all_reduce(h, group=tp)                   # tp: 32,768 bytes, blocking
        g = (h @ w2).t() @ h                           # a 128 x 128 "gradient"
        work = dist.all_reduce(g, group=dp, async_op=True)  # dp: 65,536 bytes, overlapped
        busy = w3 @ w3                                 # compute while dp runs
        work.wait()
        w2.sub_(0.01 * g)
        return busy
    dist.barrier()  # unprofiled: everyone starts together
    step()
    profiled(step)


def _worker(rank, job, port, tmp):
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)

    def profiled(step):
        et = ExecutionTraceObserver().register_callback(os.path.join(tmp, f"et-rank{rank}.json"))
        kineto = os.path.join(tmp, f"kineto-rank{rank}.json")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     schedule=schedule(wait=0, warmup=0, active=2, repeat=1), execution_trace_observer=et,
                     on_trace_ready=lambda prof: prof.export_chrome_trace(kineto)) as p:
            for _ in range(2):  # each step() closes one ProfilerStep#N
                step()
                p.step()

    (_ddp if job == "ddp" else _two_pg)(rank, dist, torch, profiled)
    dist.barrier()
    dist.destroy_process_group()


def record(job: str, out: str, port: int) -> None:
    import torch
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix=f"dtnet-torch-{job}-")
    try:
        mp.spawn(_worker, args=(job, port, tmp), nprocs=WORLD, join=True)
        dest = os.path.join(out, job)
        os.makedirs(dest, exist_ok=True)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as f:
                data = json.load(f)
            with gzip.open(os.path.join(dest, name + ".gz"), "wt", compresslevel=9) as g:
                json.dump(data, g, separators=(",", ":"))
        with open(os.path.join(dest, "RECORDED.txt"), "w") as f:
            f.write(f"recorded by scripts/record-torch-traces.py with torch {torch.__version__}, "
                    f"{WORLD} ranks, gloo on 127.0.0.1\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description="Record the gloo jobs' Kineto and execution traces (see the doc).")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "data", "torch"))
    ap.add_argument("--job", choices=JOBS, action="append", help="only these jobs (default: both)")
    ap.add_argument("--port", type=int, default=29651, help="MASTER_PORT on 127.0.0.1")
    args = ap.parse_args()
    for i, job in enumerate(args.job or JOBS):
        record(job, os.path.normpath(args.out), args.port + i)
        print(f"recorded {job} -> {os.path.join(os.path.normpath(args.out), job)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
