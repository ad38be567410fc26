"""A small data-parallel training loop: a 3-layer MLP on synthetic data, DDP with gloo.

Started by dtnet on every host of a job (examples/ddp-mlp.yaml) with torchrun's environment,
or by hand with torchrun. Every rank trains on its own shard of one synthetic regression
problem (y = x @ W_true + noise). Each step is reported to dtnet as an iteration, and each
gradient bucket's all-reduce as a collective (through a DDP communication hook). At the end
the program checks what data parallelism promises and exits 1 when it does not hold: the
loss fell, and every rank holds the same parameters.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dtnet import program


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=2, help="steps before timing (DDP rebuilds its buckets)")
    ap.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--bucket-mb", type=float, default=0.25, help="DDP gradient bucket size, MB")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model and problem on every rank
    d_in, d_out = 64, 8
    w_true = torch.randn(d_in, d_out) / d_in ** 0.5  # targets of unit variance
    x_eval = torch.randn(256, d_in)  # held out, the same on every rank
    y_eval = x_eval @ w_true
    model = torch.nn.Sequential(torch.nn.Linear(d_in, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, d_out))
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    step_no = {"it": None}

    def timed_allreduce(_state, bucket):
        """DDP's default hook (average the bucket over ranks), timed for dtnet."""
        buf = bucket.buffer()
        it = step_no["it"]
        # The id at launch: buckets complete in a different order on different ranks.
        nbytes, cid, t0 = buf.numel() * buf.element_size(), program.next_id() if it is not None else None, time.time()
        fut = dist.all_reduce(buf.div_(world), async_op=True).get_future()

        def done(f):
            if it is not None:
                program.report_collective("all_reduce", nbytes, t0, time.time(), iteration=it, id=cid)
            return f.value()[0]
        return fut.then(done)

    ddp.register_comm_hook(None, timed_allreduce)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of the data

    def step(it):
        x = torch.randn(args.batch, d_in, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(args.batch, d_out, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # the bucket all-reduces run here, overlapped with the backward pass
        opt.step()
        return loss.item()

    def eval_loss():
        with torch.no_grad():
            return torch.nn.functional.mse_loss(model(x_eval), y_eval).item()

    before = eval_loss()
    for it in range(args.warmup):
        step(it)
    for it in range(args.warmup, args.warmup + args.steps):
        step_no["it"] = it
        with program.iteration(it):
            step(it)
    after = eval_loss()
    # Data parallelism's promise: every replica is the same model.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    mine = flat.clone()
    dist.broadcast(flat, src=0)
    same = torch.tensor([int(torch.equal(flat, mine))])
    dist.all_reduce(same)
    dist.destroy_process_group()
    if same.item() != world:
        print(f"rank {rank}: parameters differ between ranks ({world - same.item()} of {world} ranks differ "
              f"from rank 0)", file=sys.stderr)
        return 1
    if not after < before:
        print(f"rank {rank}: the held-out loss did not fall ({before:.4f} -> {after:.4f})", file=sys.stderr)
        return 1
    print(f"rank {rank}: {args.steps} steps, held-out loss {before:.4f} -> {after:.4f}, "
          f"parameters identical on all {world} ranks", flush=True)
    return 0


if __name__ == "__main__":
    program.exit(main())  # not sys.exit: torch's threads may abort the interpreter's finalization
