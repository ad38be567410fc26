"""SimAI/AICB text workloads -> Trace.

Line 1: the parallelism keyword, then `key: value` pairs (model_parallel_NPU_group, ep, pp, vpp,
ga, all_gpus, checkpoints, checkpoint_initiates, pp_comm). Line 2: the row count. Then one row
per layer, 12 columns: name, dependency, fp_compute, fp_comm_type, fp_comm_size, ig_compute,
ig_comm_type, ig_comm_size, wg_compute, wg_comm_type, wg_comm_size, wg_update.

As SimAI reads it: compute times are ns; comm sizes are bytes; a comm type without suffix runs on
the tensor-parallel group for fp/ig and on the data-parallel group for wg; `_EP` means the
expert-parallel group and `_DP_EP` the data-parallel group across experts. Every rank runs the rows;
with pp > 1 every stage runs them and passes `pp_comm` bytes between stages. Each of the ga
micro-batches runs forward then backward (GPipe order); wg collectives are sent after the last
micro-batch's backward, off the compute stream, and the wg_update times close the iteration.
"""
from __future__ import annotations

import itertools

from badinput import InputError
from traffic.importers.assemble import Assembler
from traffic.trace import MAX_SIZE_BYTES

KEYWORDS = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
            "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED", "MODEL", "DATA", "TRANSFORMER",
            "TRANSFORMER_FWD_IN_BCKWD", "DLRM", "MICRO")
HEADER_INTS = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "checkpoints",
               "checkpoint_initiates", "pp_comm")
MAX_GPUS = 1 << 20  # every rank gets its own op list: a typo here must not exhaust memory
COMM = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "REDUCESCATTER": "reduce_scatter",
        "ALLTOALL": "all_to_all", "BROADCAST": "broadcast"}


def _header(line, path):
    tokens = line.split()
    if not tokens or tokens[0] not in KEYWORDS:
        raise InputError("line 1", "a parallelism keyword (" + ", ".join(KEYWORDS[:2]) + ", ...)",
                         repr(tokens[0] if tokens else ""), file=path)
    vals = {"model_parallel_NPU_group": 1, "ep": 1, "pp": 1, "vpp": 1, "ga": 1, "all_gpus": None, "pp_comm": 0}
    i = 1
    while i < len(tokens):
        key = tokens[i].rstrip(":")
        if key not in HEADER_INTS:
            raise InputError(f"line 1: {tokens[i]}", "one of " + ", ".join(k + ":" for k in HEADER_INTS),
                             "an unknown field", file=path)
        try:
            count = int(tokens[i + 1])
        except (IndexError, ValueError):
            raise InputError(f"line 1: {tokens[i]}", "an integer after it",
                             repr(tokens[i + 1]) if i + 1 < len(tokens) else "nothing", file=path) from None
        if count < 0:
            raise InputError(f"line 1: {tokens[i]}", "an integer >= 0 after it", count, file=path)
        if key in ("checkpoints", "checkpoint_initiates"):
            i += 2 + count  # a count, then that many layer numbers
            continue
        vals[key] = count
        i += 2
    if vals["all_gpus"] is None:
        raise InputError("line 1: all_gpus:", "the GPU count", "nothing", file=path)
    for k in ("model_parallel_NPU_group", "ep", "pp", "ga", "all_gpus"):
        if vals[k] < 1:
            raise InputError(f"line 1: {k}:", "an integer >= 1", vals[k], file=path)
    if vals["all_gpus"] > MAX_GPUS:
        raise InputError("line 1: all_gpus:", f"at most {MAX_GPUS} GPUs", vals["all_gpus"], file=path)
    tp, pp, n = vals["model_parallel_NPU_group"], vals["pp"], vals["all_gpus"]
    if n % (tp * pp):
        raise InputError("line 1: all_gpus:", f"a multiple of model_parallel_NPU_group x pp = {tp * pp}", n, file=path)
    dp = n // (tp * pp)
    if dp % vals["ep"]:
        raise InputError("line 1: ep:", f"a divisor of dp = {dp}", vals["ep"], file=path)
    if pp > 1 and vals["pp_comm"] <= 0:
        raise InputError("line 1: pp_comm:", "the bytes passed between stages when pp > 1", vals["pp_comm"], file=path)
    return vals, tp, pp, dp


def _rows(lines, path):
    if len(lines) < 2:
        raise InputError("line 2", "the row count", "nothing", file=path)
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise InputError("line 2", "the row count", repr(lines[1][:30]), file=path) from None
    body = [(i + 3, ln.split()) for i, ln in enumerate(lines[2:]) if ln.strip()]
    if len(body) != count:
        raise InputError("line 2", f"the number of rows that follow ({len(body)})", count, file=path)
    rows = []
    for lineno, cols in body:
        if len(cols) not in (12, 13):  # a 13th column is HYBRID_CUSTOMIZED's specific parallelism
            raise InputError(f"line {lineno}", "12 columns", f"{len(cols)} columns", file=path)
        try:
            nums = [int(cols[i]) for i in (1, 2, 4, 5, 7, 8, 10, 11)]
        except ValueError:
            raise InputError(f"line {lineno}", "integers in columns 2, 3, 5, 6, 8, 9, 11, 12",
                             " ".join(cols[:12])[:60], file=path) from None
        if any(not 0 <= v <= MAX_SIZE_BYTES for v in nums[1:]):
            raise InputError(f"line {lineno}", f"times and sizes >= 0 and <= {MAX_SIZE_BYTES}",
                             " ".join(cols[:12])[:60], file=path)
        _, fp_c, fp_s, ig_c, ig_s, wg_c, wg_s, wg_u = nums
        rows.append({"name": cols[0], "line": lineno, "fp": (fp_c, cols[3], fp_s), "ig": (ig_c, cols[6], ig_s),
                     "wg": (wg_c, cols[9], wg_s), "update": wg_u})
    return rows


def _comm(token, phase, lineno, path):
    """('all_reduce', 'tp') for ALLREDUCE in fp, ... or None for NONE."""
    if token == "NONE":
        return None
    base, _, suffix = token.partition("_")
    if base not in COMM or suffix not in ("", "EP", "DP_EP"):
        raise InputError(f"line {lineno}", "a comm type " + "/".join(COMM) + " with optional _EP or _DP_EP, or NONE",
                         token, file=path)
    group = {"": "dp" if phase == "wg" else "tp", "EP": "ep", "DP_EP": "edp"}[suffix]
    return COMM[base], group


def load(paths: list[str], algorithm: str = "ring") -> "Trace":  # noqa: F821
    if len(paths) != 1:
        raise InputError("paths", "one AICB workload file (it describes every rank)", f"{len(paths)} files")
    path = str(paths[0])
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError("aicb workload", "a readable file", e.strerror, file=path) from None
    except UnicodeDecodeError:
        raise InputError("aicb workload", "a text file", "binary data", file=path) from None
    if not lines:
        raise InputError("line 1", "the parallelism header", "an empty file", file=path)
    vals, tp, pp, dp = _header(lines[0], path)
    rows = _rows(lines, path)
    for row in rows:
        for phase in ("fp", "ig", "wg"):
            row[phase] = row[phase][:1] + (_comm(row[phase][1], phase, row["line"], path), row[phase][2])
    n, ep = tp * pp * dp, vals["ep"]
    asm = Assembler(n, [path] * n, algorithm)
    # Megatron/SimAI layout: tp fastest, then dp, then pp.
    rank = lambda t, d, p: t + tp * (d + dp * p)  # noqa: E731
    groups = {}
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                r = rank(t, d, p)
                members = {"tp": [rank(x, d, p) for x in range(tp)], "dp": [rank(t, x, p) for x in range(dp)],
                           "ep": [rank(t, (d // ep) * ep + x, p) for x in range(ep)],
                           "edp": [rank(t, x, p) for x in range(d % ep, dp, ep)]}
                groups[r] = {k: (asm.group(v, f"{k}-" + "_".join(map(str, v))) if len(v) > 1 else None)
                             for k, v in members.items()}
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                _rank_stream(asm, rank(t, d, p), p, pp, rows, vals, groups[rank(t, d, p)], rank(t, d, p - 1),
                             rank(t, d, p + 1))
    meta = {"workload": "import", "format": "aicb", "files": [path], "tp": tp, "pp": pp, "dp": dp, "ep": ep,
            "ga": vals["ga"], "all_gpus": vals["all_gpus"]}
    return asm.trace(meta)


def _rank_stream(asm, r, p, pp, rows, vals, groups, prev_rank, next_rank):
    keys = itertools.count()
    last: list = []  # the compute stream's latest op

    def add(fn, *args, on_stream=True, extra=(), **kw):
        k = next(keys)
        fn(r, k, *args, deps=last + list(extra), **kw)
        if on_stream:
            last[:] = [k]
        return k

    def collective(row, phase, **kw):
        _, spec, size = row[phase]
        if spec is None or groups[spec[1]] is None:  # no comm, or a group of one GPU
            return None
        return add(asm.collective, spec[0], groups[spec[1]], size, label=f"{phase} {row['name']}",
                   where=f"line {row['line']}", **kw)

    pp_bytes, ga = vals["pp_comm"], vals["ga"]
    sends, wg_ops = [], []
    for mb in range(ga):
        if p > 0:
            add(asm.p2p, "recv", prev_rank, pp_bytes, label=f"pp recv act mb{mb}")
        for row in rows:
            add(asm.compute, row["fp"][0] / 1e9, label=f"fp {row['name']}")
            collective(row, "fp")
        if p < pp - 1:
            sends.append(add(asm.p2p, "send", next_rank, pp_bytes, on_stream=False, label=f"pp send act mb{mb}"))
    for mb in range(ga):
        if p < pp - 1:
            add(asm.p2p, "recv", next_rank, pp_bytes, label=f"pp recv grad mb{mb}")
        for row in reversed(rows):
            add(asm.compute, row["ig"][0] / 1e9, label=f"ig {row['name']}")
            collective(row, "ig")
            add(asm.compute, row["wg"][0] / 1e9, label=f"wg {row['name']}")
            if mb == ga - 1:  # gradients are synced once, overlapping the rest of backward
                k = collective(row, "wg", on_stream=False, extra=wg_ops[-1:])
                if k is not None:
                    wg_ops.append(k)
        if p > 0:
            sends.append(add(asm.p2p, "send", prev_rank, pp_bytes, on_stream=False, label=f"pp send grad mb{mb}"))
    add(asm.compute, sum(row["update"] for row in rows) / 1e9, extra=wg_ops[-1:] + sends, label="wg update")
