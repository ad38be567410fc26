"""PyTorch profiler (Kineto) JSON traces, one per rank -> Trace.

NCCL kernels (cat "kernel", name ncclKernel_*/ncclDevKernel_*) carry the collective in `args`:
"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
"Process Group Ranks" (and for send/recv "Src Rank"/"Dst Rank"). Other kernels become compute:
consecutive ones between two NCCL kernels merge into one op lasting the union of their intervals.
Ops chain in start-time order on each rank. Sizes follow nccl-tests: all_gather counts its output,
every other collective its input.
"""
from __future__ import annotations

import json

from badinput import InputError
from traffic.files import read_json
from traffic.importers.assemble import Assembler
from traffic.trace import is_finite_number

DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
               "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
               "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _op_name(name: str):
    n = name.lower().replace("_", "").replace("-", "")
    for key, op in (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("barrier", "all_reduce")):
        if key in n:
            return op
    if n in ("reduce", "send", "recv"):
        return n
    return None


def _events(path):
    d = read_json(path, "kineto trace")
    if isinstance(d, list):
        d = {"traceEvents": d}
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        raise InputError("traceEvents", "a list of trace events", type(d.get("traceEvents") if isinstance(d, dict)
                                                                          else d).__name__, file=path)
    info = d.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise InputError("distributedInfo", "an object", type(info).__name__, file=path)
    rank = info.get("rank")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        raise InputError("distributedInfo.rank", "an integer rank", rank, file=path)
    return rank, d["traceEvents"]


def _int(args, key, where, path, default=None):
    v = args.get(key, default)
    if isinstance(v, str) and v.lstrip("-").isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise InputError(f"{where}.args.{key}", "an integer >= 0", v, file=path)
    return v


def _ranks(args, where, path, nranks):
    """The group's global ranks: each must have its own file, so they lie in 0..nranks-1."""
    v = args.get("Process Group Ranks")
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            raise InputError(f"{where}.args.Process Group Ranks", "a list of ranks", v[:40], file=path) from None
    if v is None:
        start = _int(args, "Global rank start", where, path, 0)
        stride = _int(args, "Global rank stride", where, path, 1)
        size = _int(args, "Group size", where, path)
        v = [start + i * stride for i in range(min(size, nranks + 1))]
        if not v or v[-1] >= nranks or size > nranks:
            raise InputError(f"{where}.args", f"Global rank start, stride and Group size within ranks 0..{nranks - 1} "
                             "(one file per rank)", f"start {start}, stride {stride}, size {size}", file=path)
        return v
    if not isinstance(v, list) or not v or \
            not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < nranks for x in v):
        raise InputError(f"{where}.args.Process Group Ranks", f"a list of ranks in 0..{nranks - 1} (one file per rank)",
                         v, file=path)
    if "Group size" in args and _int(args, "Group size", where, path) != len(v):
        raise InputError(f"{where}.args.Group size", f"the {len(v)} ranks listed", args["Group size"], file=path)
    return v


def load(paths: list[str], algorithm: str = "ring") -> "Trace":  # noqa: F821
    """File i is rank i unless its distributedInfo.rank says otherwise."""
    paths = [str(p) for p in paths]
    loaded = [_events(p) for p in paths]
    ranks = [r if isinstance(r, int) else i for i, (r, _) in enumerate(loaded)]
    if sorted(ranks) != list(range(len(paths))):
        raise InputError("distributedInfo.rank", f"each of ranks 0..{len(paths) - 1} once across the files",
                         ranks, file=", ".join(paths))
    files = [paths[ranks.index(r)] for r in range(len(paths))]
    asm = Assembler(len(paths), files, algorithm)
    for (_, events), rank, path in zip(loaded, ranks, paths):
        _convert(asm, rank, events, path)
    return asm.trace({"workload": "import", "format": "kineto", "files": files})


def _convert(asm, rank, events, path):
    kernels = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("cat") != "kernel" or ev.get("ph", "X") != "X":
            continue
        where = f"traceEvents[{i}]"
        ts, dur = ev.get("ts"), ev.get("dur", 0)
        if not (is_finite_number(ts) and is_finite_number(dur)) or dur < 0:
            raise InputError(f"{where}", "a kernel with numeric ts and dur >= 0, both finite", f"ts={ts!r} dur={dur!r}",
                             file=path)
        kernels.append((float(ts), float(dur), i, ev))
    kernels.sort(key=lambda k: (k[0], k[2]))
    last, busy = [], []  # busy: compute intervals waiting to become one op

    def flush(key):
        if not busy:
            return
        total, end = 0.0, float("-inf")
        for s, e in busy:  # union of intervals
            if s > end:
                total += e - s
                end = e
            elif e > end:
                total += e - end
                end = e
        asm.compute(rank, f"c{key}", total / 1e6, last[:], label=f"{len(busy)} kernels")
        last[:] = [f"c{key}"]
        busy.clear()

    for ts, dur, i, ev in kernels:
        name, args = str(ev.get("name", "")), ev.get("args") or {}
        if not isinstance(args, dict):
            raise InputError(f"traceEvents[{i}].args", "an object", type(args).__name__, file=path)
        if not (name.startswith("nccl") and "Collective name" in args):
            busy.append((ts, ts + dur))
            continue
        flush(i)
        where = f"traceEvents[{i}]"
        op = _op_name(str(args["Collective name"]))
        if op is None:
            raise InputError(f"{where}.args.Collective name", "a collective dtnet models (all_reduce, all_gather, "
                             "reduce_scatter, all_to_all, broadcast, reduce, send, recv, barrier)",
                             args["Collective name"], file=path)
        dtype = str(args.get("dtype", "")).lower()
        if dtype not in DTYPE_BYTES:
            raise InputError(f"{where}.args.dtype", "a tensor dtype (Float, BFloat16, Half, ...)", args.get("dtype"),
                             file=path)
        nelems = _int(args, "Out msg nelems" if op in ("all_gather", "recv") else "In msg nelems", where, path)
        size = nelems * DTYPE_BYTES[dtype]
        if op in ("send", "recv"):
            peer_key = "Dst Rank" if op == "send" else "Src Rank"
            peer = _int(args, peer_key, where, path)
            asm.p2p(rank, i, op, peer, size, last[:], name, where)
        else:
            members = _ranks(args, where, path, asm.nranks)
            pg = args.get("Process Group Name")
            group = asm.group(sorted(members), f"pg{pg}" if pg not in (None, "") else None)
            asm.collective(rank, i, op, group, size, last[:], name, where)
        last[:] = [i]
    flush("end")
