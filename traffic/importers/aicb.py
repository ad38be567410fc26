"""SimAI/AICB text workloads -> a compact Trace (one rank class per pipeline stage).

Line 1: the parallelism keyword, then `key: value` pairs (model_parallel_NPU_group, ep, pp, vpp,
ga, all_gpus, checkpoints, checkpoint_initiates, pp_comm). Line 2: the row count. Then one row
per layer, 12 columns: name, dependency, fp_compute, fp_comm_type, fp_comm_size, ig_compute,
ig_comm_type, ig_comm_size, wg_compute, wg_comm_type, wg_comm_size, wg_update.

As SimAI replays it (astra-sim-alibabacloud's Workload.cc, HYBRID_TRANSFORMER_FWD_IN_BCKWD):
one pass runs every row's forward (fp compute, then its comm, blocking), then every row in
reverse for backward (ig compute and comm, blocking; wg compute, then its comm off the compute
stream). The rows are the whole iteration of one GPU: AICB's generator writes the ga micro-batches
out one after another (a few rows before them and after them), so rows are not repeated ga times.
Times are ns, sizes bytes. A comm type without suffix runs on the tensor-parallel group for fp/ig
and on the data-parallel group for wg; `_EP` on the expert-parallel group, `_DP_EP` on the
data-parallel group of one expert shard. Every rank of a stage runs the same rows.

Pipeline (pp > 1): SimAI adds pipeline time analytically; here the stages pass pp_comm bytes.
The ga micro-batch blocks are found in the rows (ga consecutive copies, by row name and comm types,
with at most MAX_ROWS_OUTSIDE rows before and after them) and each is split into `vpp` model
chunks: AICB writes the layers per stage as vpp, and SimAI's bubble model takes it as the virtual
pipeline size, so each chunk is one repetition of the layer rows inside a block (the block's first
rows go with chunk 0, its last with the last chunk). With vpp = 1 the stages run GPipe (all
forwards, then all backwards, the last micro-batch first, as SimAI's reverse pass does); with
vpp > 1 Megatron's interleaved order, which needs ga to be a multiple of pp. A file whose rows do
not show that structure is refused with the header key it contradicts.
"""
from __future__ import annotations

import numpy as np

from badinput import InputError, files
from traffic.layout import Layout
from traffic.limits import MAX_RANKS, MAX_SIZE_BYTES
from traffic.trace import Op, RankClass, Trace

KEYWORDS = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED",
            "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED", "MODEL", "DATA", "TRANSFORMER",
            "TRANSFORMER_FWD_IN_BCKWD", "DLRM", "MICRO")
HEADER_INTS = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "checkpoints",
               "checkpoint_initiates", "pp_comm")
MAX_GPUS = MAX_RANKS
MAX_ROWS_OUTSIDE = 1024  # rows before the first micro-batch block and after the last, together
COMM = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "REDUCESCATTER": "reduce_scatter",
        "ALLTOALL": "all_to_all", "BROADCAST": "broadcast"}


def _header(line, path):
    tokens = line.split()
    if not tokens or tokens[0] not in KEYWORDS:
        raise InputError("line 1", "a parallelism keyword (" + ", ".join(KEYWORDS[:2]) + ", ...)",
                         repr(tokens[0] if tokens else ""), file=path)
    vals = {"model_parallel_NPU_group": 1, "ep": 1, "pp": 1, "vpp": 1, "ga": 1, "all_gpus": None, "pp_comm": 0}
    i = 1
    seen = set()
    while i < len(tokens):
        key = tokens[i].rstrip(":")
        if key not in HEADER_INTS:
            raise InputError(f"line 1: {tokens[i]}", "one of " + ", ".join(k + ":" for k in HEADER_INTS),
                             "an unknown field", file=path)
        if key in seen:  # one of the two would silently win
            raise InputError(f"line 1: {tokens[i]}", "each field once in the header", "it given twice", file=path)
        seen.add(key)
        try:
            count = int(tokens[i + 1])
        except (IndexError, ValueError):
            raise InputError(f"line 1: {tokens[i]}", "an integer after it",
                             repr(tokens[i + 1]) if i + 1 < len(tokens) else "nothing", file=path) from None
        if count < 0:
            raise InputError(f"line 1: {tokens[i]}", "an integer >= 0 after it", count, file=path)
        if key not in ("pp_comm", "all_gpus") and count > MAX_GPUS:  # stages, micro-batches, layers
            raise InputError(f"line 1: {tokens[i]}", f"an integer in 0..{MAX_GPUS} after it", count, file=path)
        if key in ("checkpoints", "checkpoint_initiates"):
            i += 2 + count  # a count, then that many layer numbers
            continue
        vals[key] = count
        i += 2
    if vals["all_gpus"] is None:
        raise InputError("line 1: all_gpus:", "the GPU count", "nothing", file=path)
    for k in ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus"):
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
    if vals["pp_comm"] > MAX_SIZE_BYTES:
        raise InputError("line 1: pp_comm:", f"at most {MAX_SIZE_BYTES} bytes", vals["pp_comm"], file=path)
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


def load(paths: list[str], algorithm: str = "ring") -> Trace:
    from traffic.collectives import ALGORITHMS
    if len(paths) != 1:
        raise InputError("paths", "one AICB workload file (it describes every rank)", f"{len(paths)} files")
    if algorithm not in ALGORITHMS:
        raise InputError("algorithm", "one of " + ", ".join(ALGORITHMS), algorithm)
    path = str(paths[0])
    try:
        lines = files.read_bytes(path, "aicb workload").decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError("aicb workload", "a text file", "binary data", file=path) from None
    if not lines:
        raise InputError("line 1", "the parallelism header", "an empty file", file=path)
    vals, tp, pp, dp = _header(lines[0], path)
    rows = _rows(lines, path)
    for row in rows:
        for phase in ("fp", "ig", "wg"):
            row[phase] = row[phase][:1] + (_comm(row[phase][1], phase, row["line"], path), row[phase][2])
    ep = vals["ep"]
    sizes = {"tp": tp, "dp": dp, "ep": ep, "edp": dp // ep}
    layout = Layout(tp, dp, pp, ep, ("tp", "dp", "pp"), tuple(f for f in ("tp", "dp", "ep", "edp") if sizes[f] > 1))
    pipe = _Pipeline(rows, vals, pp, path) if pp > 1 else None
    shared: dict = {}  # one Op object per distinct op, shared by the stages that run it
    classes = []
    for p in range(pp):
        stream = _Stage(p, pp, rows, vals, layout, algorithm, shared).build(pipe)
        classes.append(RankClass(layout.select({"pp": [p]}), stream, f"stage{p}", {"pp": [p]}))
    meta = {"workload": "import", "format": "aicb", "files": [path], "tp": tp, "pp": pp, "dp": dp, "ep": ep,
            "vpp": vals["vpp"], "ga": vals["ga"], "all_gpus": vals["all_gpus"], "rank_order": "tp-dp-pp"}
    if pipe is not None:
        meta.update(schedule="interleaved" if pipe.vpp > 1 else "gpipe", rows_per_microbatch=pipe.block,
                    rows_before_microbatches=pipe.start)
    trace = Trace(tp * pp * dp, {}, meta=meta, classes=classes, layout=layout)
    trace.validate(file=path)
    return trace


def _repeats(keys: list, count: int, outside: int):
    """(start, period) of `count` consecutive copies of one run of keys, the longest such run with
    at most `outside` keys left over (the earliest start for it), or None."""
    n = len(keys)
    if count == 1:
        return (0, n) if n else None
    codes = {}
    a = np.array([codes.setdefault(k, len(codes)) for k in keys], dtype=np.int64)
    need = lambda per: (count - 1) * per  # noqa: E731
    for per in range(n // count, max(0, (n - outside) // count) - 1, -1):
        if per < 1:
            break
        same = np.concatenate(([False], a[:-per] == a[per:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        starts, stops = edges[::2], edges[1::2]
        long = np.flatnonzero(stops - starts >= need(per))
        if long.size:
            return int(starts[long[0]]), per
    return None


class _Pipeline:
    """Where the micro-batch blocks and their vpp chunks lie in the rows, and the stage order."""

    def __init__(self, rows, vals, pp, path):
        ga, vpp = vals["ga"], vals["vpp"]
        key = [(r["name"], r["fp"][1], r["ig"][1], r["wg"][1]) for r in rows]
        found = _repeats(key, ga, MAX_ROWS_OUTSIDE)
        if found is None:
            raise InputError("line 1: ga:", f"rows that hold ga={ga} micro-batch blocks one after another (as AICB "
                             f"writes them; at most {MAX_ROWS_OUTSIDE} rows outside them), to place the pipeline "
                             f"transfers of pp={pp}", f"no {ga}-fold repetition in {len(rows)} rows", file=path)
        self.start, self.block = found
        self.ga = ga
        self.vpp = max(vpp, 1)
        if self.vpp > 1 and ga % pp:
            raise InputError("line 1: vpp:", f"ga ({ga}) a multiple of pp ({pp}) for an interleaved pipeline "
                             f"(vpp > 1), as Megatron requires; or vpp: 1", vpp, file=path)
        first = key[self.start:self.start + self.block]
        inner = _repeats(first, self.vpp, len(first))
        if inner is None:
            raise InputError("line 1: vpp:", f"{vpp} repetitions of the layer rows in each micro-batch block of "
                             f"{self.block} rows (one per virtual pipeline chunk); or vpp: 1", vpp, file=path)
        u, q = inner
        self.cuts = [0] + [u + c * q for c in range(1, self.vpp)] + [self.block]
        if self.vpp == 1:
            self.order = [(m, 0) for m in range(ga)]
        else:  # Megatron's interleaved schedule: groups of pp micro-batches, chunk by chunk
            k = pp * self.vpp
            self.order = [((i // k) * pp + i % pp, (i % k) // pp) for i in range(ga * self.vpp)]

    def rows_of(self, m, c) -> range:
        base = self.start + m * self.block
        return range(base + self.cuts[c], base + self.cuts[c + 1])

    def outside(self, n):
        return range(0, self.start), range(self.start + self.ga * self.block, n)


class _Stage:
    """One pipeline stage's stream; ops equal to another stage's are the same object."""

    def __init__(self, p, pp, rows, vals, layout, algorithm, shared):
        self.p, self.pp, self.rows, self.vals, self.layout = p, pp, rows, vals, layout
        self.algorithm, self.shared = algorithm, shared
        self.ops: list[Op] = []
        self.last: str | None = None
        self.wg_last: str | None = None
        self.sends: list[str] = []

    def add(self, oid, kind, on_stream=True, extra=(), **kw):
        deps = ((self.last,) if self.last else ()) + tuple(x for x in extra if x)
        o = Op(oid, kind, deps, **kw)
        key = (oid, kind, deps, o.duration_s, o.op, o.group, o.size_bytes, o.peer, o.label)
        self.ops.append(self.shared.setdefault(key, o))
        if on_stream:
            self.last = oid
        return oid

    def collective(self, oid, row, phase, **kw):
        _, spec, size = row[phase]
        if spec is None or spec[1] not in self.layout.families:  # no comm, or a group of one GPU
            return None
        return self.add(oid, "collective", op=spec[0], algorithm=self.algorithm, group=spec[1], size_bytes=size,
                        label=f"{phase} {row['name']}", **kw)

    def forward(self, j):
        row = self.rows[j]
        self.add(f"f{j}", "compute", duration_s=row["fp"][0] / 1e9, label=f"fp {row['name']}")
        self.collective(f"f{j}c", row, "fp")

    def backward(self, j):
        row = self.rows[j]
        self.add(f"i{j}", "compute", duration_s=row["ig"][0] / 1e9, label=f"ig {row['name']}")
        self.collective(f"i{j}c", row, "ig")
        self.add(f"w{j}", "compute", duration_s=row["wg"][0] / 1e9, label=f"wg {row['name']}")
        k = self.collective(f"w{j}c", row, "wg", on_stream=False, extra=(self.wg_last,))
        self.wg_last = k or self.wg_last  # gradients sync off the compute stream, in order

    def p2p(self, kind, direction, m, c, src, dst):
        """direction "a": activations forward; "g": gradients backward. The id names the sender."""
        size = self.vals["pp_comm"]
        oid = f"{direction}/m{m}/c{c}/{src}>{dst}"
        label = f"pp {kind} {'act' if direction == 'a' else 'grad'} mb{m} chunk{c}"
        peer = "pp+1" if (kind == "send") == (direction == "a") else "pp-1"
        k = self.add(oid, kind, on_stream=kind == "recv", size_bytes=size, peer=peer, label=label)
        if kind == "send":
            self.sends.append(k)

    def build(self, pipe: _Pipeline | None) -> list[Op]:
        n, p, pp = len(self.rows), self.p, self.pp
        if pipe is None:
            for j in range(n):
                self.forward(j)
            for j in reversed(range(n)):
                self.backward(j)
        else:
            before, after = pipe.outside(n)
            last_chunk = pipe.vpp - 1
            for j in before:
                self.forward(j)
            for m, c in pipe.order:
                if p > 0 or c > 0:  # from the previous stage, or the last stage's previous chunk
                    self.p2p("recv", "a", m, c if p > 0 else c - 1, (p - 1) % pp, p)
                for j in pipe.rows_of(m, c):
                    self.forward(j)
                if p < pp - 1 or c < last_chunk:
                    self.p2p("send", "a", m, c, p, (p + 1) % pp)
            for j in after:
                self.forward(j)
            for j in reversed(after):
                self.backward(j)
            for m, c in reversed(pipe.order):
                if p < pp - 1 or c < last_chunk:
                    self.p2p("recv", "g", m, c if p < pp - 1 else c + 1, (p + 1) % pp, p)
                for j in reversed(pipe.rows_of(m, c)):
                    self.backward(j)
                if p > 0 or c > 0:
                    self.p2p("send", "g", m, c, p, (p - 1) % pp)
            for j in reversed(before):
                self.backward(j)
        self.add("update", "compute", duration_s=sum(r["update"] for r in self.rows) / 1e9,
                 extra=(self.wg_last, *self.sends), label="wg update")
        return self.ops
