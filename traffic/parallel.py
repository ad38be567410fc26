"""Parallel configs (tp, pp, dp, ep) and the op streams of a training job.

Every GPU of a pipeline stage runs the same stream: its collectives name their group by family
("tp", "dp", "ep", "edp") and its pipeline sends and recvs their peer by rule ("pp+1", "pp-1"),
which the trace's Layout resolves per rank. So a job is one rank class per stage, whatever its
GPU count: GPT-3 175B with tp 8 and pp 8 is 8 streams at 1,024 GPUs and at 131,072.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from badinput import InputError
from traffic.collectives import ALGORITHMS, effective_gpus_per_server
from traffic.models import DTYPE_BYTES, GPUS, PRESETS, Gpu, Model, attention_flops, attention_params, \
    expert_params, logits_flops, mlp_dense_params, mlp_flops, model_from_spec, padded_vocab
from traffic.layout import Layout
from traffic.spec import SpecReader
from traffic.trace import MAX_DISTINCT_OPS, MAX_ITERATIONS, MAX_RANKS, MAX_SIZE_BYTES, Op, RankClass, Trace, \
    _no_gc

DIMS = ("tp", "dp", "pp")
SCHEDULES = ("1f1b", "gpipe")
# Global batch in sequences from the papers: GPT-3 Table 2.1 (0.5M, 1M, 3.2M tokens of 2048), and
# Llama 2's 4M tokens of 4096. Mixtral published none; 1024 sequences matches Llama 2's tokens.
PUBLISHED_GLOBAL_BATCH = {"gpt-small": 256, "gpt3-13b": 512, "gpt3-175b": 1536, "llama2-70b": 1024,
                          "mixtral-8x7b": 1024}
OPTIMIZER_BYTES_PER_PARAM = 24
MEGATRON_BUCKET_PARAMS = 40_000_000  # Adam touches fp32 master, grad, m, v: a memory-bound pass


@dataclass(frozen=True)
class ParallelConfig:
    tp: int
    pp: int
    dp: int
    ep: int = 1
    microbatches: int = 1
    micro_batch_size: int = 1
    zero_stage: int = 0
    schedule: str = "1f1b"
    rank_order: tuple = ("tp", "dp", "pp")  # fastest-varying first: Megatron's default
    sequence_parallel: bool = False

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def layout(self) -> Layout:
        """The rank layout (no group families: see layout_of for a job's)."""
        return Layout(self.tp, self.dp, self.pp, self.ep, self.rank_order)

    def rank(self, t: int, d: int, p: int) -> int:
        return int(self.layout.rank(t, d, p))

    def coords(self, rank: int) -> tuple[int, int, int]:
        return tuple(int(x) for x in self.layout.coords(rank))


def check_parallel(model: Model, par: ParallelConfig, nranks: int, err) -> None:
    """Rejects configs Megatron would reject; `err(key, expected, found)` builds the InputError."""
    if par.world != nranks:
        raise err("dp", f"tp x pp x dp = {nranks} GPUs", f"{par.tp} x {par.pp} x {par.dp} = {par.world}")
    if model.layers % par.pp:
        raise err("pp", f"a divisor of the model's {model.layers} layers", par.pp)
    if model.heads % par.tp or model.kv % par.tp:
        raise err("tp", f"a divisor of heads={model.heads} and kv_heads={model.kv}", par.tp)
    if model.ffn_hidden % par.tp:
        raise err("tp", f"a divisor of ffn_hidden={model.ffn_hidden}", par.tp)
    if par.dp % par.ep:
        raise err("ep", f"a divisor of dp={par.dp}", par.ep)
    if par.ep > 1 and model.experts % par.ep:
        raise err("ep", f"a divisor of the model's experts={model.experts}", par.ep)
    if par.sequence_parallel and par.tp == 1:
        raise err("sequence_parallel", "tp > 1", "tp = 1")


@dataclass(frozen=True)
class _Costs:
    """Per-micro-batch seconds and bytes for one GPU of the job."""
    attn_fwd_s: float
    mlp_fwd_s: float
    logits_fwd_s: float
    bwd_factor: float           # 2, or 3 with activation recomputation
    act_bytes: int              # b x s x h activations, what a TP collective moves
    pp_bytes: int               # what goes between stages
    a2a_bytes: int              # per-rank all-to-all send buffer of an MoE layer
    layer_dense_grad_bytes: int  # grads synced over dp, per layer per GPU
    layer_expert_grad_bytes: int  # grads synced over the expert-data-parallel group
    layer_param_bytes: int      # params gathered per layer under ZeRO-3
    emb_grad_bytes: int         # embedding (first stage) / output layer (last stage)
    optimizer_s: float


def _costs(m: Model, par: ParallelConfig, gpu: Gpu, efficiency: float, dtype: str, grad_dtype: str,
           recompute: bool) -> _Costs:
    tokens = par.micro_batch_size * m.seq_len
    rate = gpu.peak_tflops * 1e12 * efficiency
    db, gb = DTYPE_BYTES[dtype], DTYPE_BYTES[grad_dtype]
    act = tokens * m.hidden * db
    local_tokens = tokens // par.tp if par.sequence_parallel else tokens
    dense = attention_params(m) + mlp_dense_params(m)
    experts = (m.experts // par.ep) * expert_params(m) if m.moe else 0
    emb = padded_vocab(m, par.tp) * m.hidden // par.tp
    local_params = (m.layers // par.pp) * (dense + experts) // par.tp + emb
    shards = par.dp if par.zero_stage >= 1 else 1
    return _Costs(
        attn_fwd_s=attention_flops(m, tokens) / par.tp / rate,
        mlp_fwd_s=mlp_flops(m, tokens) / par.tp / rate,
        logits_fwd_s=logits_flops(m, tokens) / par.tp / rate,
        bwd_factor=3.0 if recompute else 2.0,
        act_bytes=act,
        pp_bytes=act // par.tp if par.sequence_parallel else act,
        a2a_bytes=local_tokens * m.top_k * m.hidden * db,
        layer_dense_grad_bytes=dense // par.tp * gb,
        layer_expert_grad_bytes=experts // par.tp * gb,
        layer_param_bytes=(dense + experts) // par.tp * db,
        emb_grad_bytes=emb * gb,
        optimizer_s=local_params / shards * OPTIMIZER_BYTES_PER_PARAM / (gpu.hbm_gbps * 1e9),
    )


# Skeleton entry fields; gkind is tp|dp|ep|edp|None and peer a pipeline-stage offset or None.
_ID, _KIND, _DEPS, _DUR, _OP, _ALG, _GKIND, _SIZE, _PEER, _IT, _LABEL = range(11)


class _StageBuilder:
    """Builds one pipeline stage's skeleton: the op stream every GPU of that stage runs."""

    def __init__(self, job: "_Job", p: int):
        self.job, self.p, self.entries = job, p, []
        self.prev: str | None = None  # last op of the compute stream
        self.it = 0

    def emit(self, oid, kind, *, chain=True, extra=(), dur=0.0, op=None, gkind=None, size=0, peer=None,
             label=""):
        deps = ((self.prev,) if self.prev else ()) + tuple(d for d in extra if d)
        alg = self.job.algorithms.get(gkind) if kind == "collective" else None
        self.entries.append((oid, kind, deps, dur, op, alg, gkind, size, peer, self.it, label))
        if chain:
            self.prev = oid
        return oid

    def build(self):
        job, par = self.job, self.job.par
        for it in range(job.iterations):
            self.it = it
            self.pending: list[str] = []
            self.last = {"dp": None, "edp": None}
            order = _microbatch_order(par.schedule, par.pp, self.p, par.microbatches)
            for n, (phase, mb) in enumerate(order):
                if phase == "F":
                    self.forward(mb)
                else:
                    self.backward(mb, sync=par.zero_stage >= 2 or n == len(order) - 1)
            self.optimizer()
        return self.entries

    # -- pieces -------------------------------------------------------------------------------
    def _tp(self, oid, op, label):
        if self.job.par.tp > 1:
            self.emit(oid, "collective", op=op, gkind="tp", size=self.job.costs.act_bytes, label=label)

    def _tp_before(self, oid, label):  # sequence parallelism gathers the sequence before a block
        if self.job.par.sequence_parallel:
            self._tp(oid, "all_gather", label)

    def _tp_after(self, oid, label):
        self._tp(oid, "reduce_scatter" if self.job.par.sequence_parallel else "all_reduce", label)

    def _layers(self):
        per = self.job.model.layers // self.job.par.pp
        return range(self.p * per, (self.p + 1) * per)

    def _zero3_gather(self, oid, label, extra_bytes=0):
        if self.job.par.zero_stage == 3 and self.job.par.dp > 1:
            self.emit(oid, "collective", op="all_gather", gkind="dp",
                      size=self.job.costs.layer_param_bytes + extra_bytes, label=label)

    def forward(self, mb):
        job, c, p, pp = self.job, self.job.costs, self.p, self.job.par.pp
        pfx = f"i{self.it}/f{mb}"
        if p > 0:
            self.emit(f"{pfx}/act{p - 1}>{p}", "recv", size=c.pp_bytes, peer=-1, label=f"pp recv act mb{mb}")
        for n, layer in enumerate(self._layers()):
            lp = f"{pfx}/L{layer}"
            emb = c.emb_grad_bytes // DTYPE_BYTES[job.grad_dtype] * DTYPE_BYTES[job.dtype] if n == 0 and (
                p == 0 or p == pp - 1) else 0
            self._zero3_gather(f"{lp}/zero-ag", f"zero3 gather L{layer}", emb)
            self._tp_before(f"{lp}/attn-ag", f"tp-fwd L{layer}")
            self.emit(f"{lp}/attn", "compute", dur=c.attn_fwd_s, label=f"attn fwd L{layer}")
            self._tp_after(f"{lp}/attn-tp", f"tp-fwd L{layer}")
            self._tp_before(f"{lp}/mlp-ag", f"tp-fwd L{layer}")
            self._mlp(lp, layer, c.mlp_fwd_s, "fwd")
            self._tp_after(f"{lp}/mlp-tp", f"tp-fwd L{layer}")
        if p == pp - 1:
            self.emit(f"{pfx}/logits", "compute", dur=c.logits_fwd_s, label=f"logits fwd mb{mb}")
        else:
            self.pending.append(self.emit(f"{pfx}/act{p}>{p + 1}", "send", chain=False, size=c.pp_bytes, peer=1,
                                          label=f"pp send act mb{mb}"))

    def _mlp(self, lp, layer, dur, phase):
        if self.job.model.moe and self.job.par.ep > 1:
            size = self.job.costs.a2a_bytes
            self.emit(f"{lp}/{phase}-a2a-in", "collective", op="all_to_all", gkind="ep", size=size,
                      label=f"ep {phase} dispatch L{layer}")
            self.emit(f"{lp}/{phase}-experts", "compute", dur=dur, label=f"experts {phase} L{layer}")
            self.emit(f"{lp}/{phase}-a2a-out", "collective", op="all_to_all", gkind="ep", size=size,
                      label=f"ep {phase} combine L{layer}")
        else:
            self.emit(f"{lp}/mlp-{phase}", "compute", dur=dur, label=f"mlp {phase} L{layer}")

    def backward(self, mb, sync):
        c, p, pp = self.job.costs, self.p, self.job.par.pp
        bf = c.bwd_factor
        pfx = f"i{self.it}/b{mb}"
        buckets = _Buckets(self, sync, pfx)
        if p < pp - 1:
            self.emit(f"{pfx}/grad{p + 1}>{p}", "recv", size=c.pp_bytes, peer=1, label=f"pp recv grad mb{mb}")
        else:
            self.emit(f"{pfx}/logits", "compute", dur=c.logits_fwd_s * bf, label=f"logits bwd mb{mb}")
            buckets.add("dp", c.emb_grad_bytes)
        for layer in reversed(self._layers()):
            lp = f"{pfx}/L{layer}"
            self._zero3_gather(f"{lp}/zero-ag", f"zero3 gather L{layer}")
            self._tp_before(f"{lp}/mlp-ag", f"tp-bwd L{layer}")
            self._mlp(lp, layer, c.mlp_fwd_s * bf, "bwd")
            self._tp_after(f"{lp}/mlp-tp", f"tp-bwd L{layer}")
            self._tp_before(f"{lp}/attn-ag", f"tp-bwd L{layer}")
            self.emit(f"{lp}/attn", "compute", dur=c.attn_fwd_s * bf, label=f"attn bwd L{layer}")
            self._tp_after(f"{lp}/attn-tp", f"tp-bwd L{layer}")
            buckets.add("edp", c.layer_expert_grad_bytes)
            buckets.add("dp", c.layer_dense_grad_bytes)
        if p == 0:
            buckets.add("dp", c.emb_grad_bytes)
        buckets.flush()
        if p > 0:
            self.pending.append(self.emit(f"{pfx}/grad{p}>{p - 1}", "send", chain=False, size=c.pp_bytes, peer=-1,
                                          label=f"pp send grad mb{mb}"))

    def optimizer(self):
        job, par = self.job, self.job.par
        it = self.it
        self.emit(f"i{it}/optimizer", "compute", dur=job.costs.optimizer_s,
                  extra=tuple(self.pending) + (self.last["dp"], self.last["edp"]), label="optimizer step")
        if par.zero_stage in (1, 2):  # each rank updated its shard; gather the new params
            db = DTYPE_BYTES[job.dtype]
            for gkind, per_layer in (("dp", job.costs.layer_dense_grad_bytes), ("edp", job.costs.layer_expert_grad_bytes)):
                total = per_layer * len(self._layers()) + (job.costs.emb_grad_bytes if gkind == "dp" and (
                    self.p == 0 or self.p == par.pp - 1) else 0)
                if total and job.group_size[gkind] > 1:
                    self.emit(f"i{it}/zero-ag-{gkind}", "collective", op="all_gather", gkind=gkind,
                              size=total // DTYPE_BYTES[job.grad_dtype] * db, label=f"zero gather params {gkind}")


class _Buckets:
    """Gradient buckets, filled as backward frees layers and sent off the compute stream."""

    def __init__(self, stage: _StageBuilder, sync: bool, prefix: str):
        self.stage, self.sync, self.prefix = stage, sync, prefix
        self.fill = {"dp": 0, "edp": 0}
        self.count = {"dp": 0, "edp": 0}

    def add(self, gkind, nbytes):
        if not self.sync or not nbytes or self.stage.job.group_size[gkind] < 2:
            return
        self.fill[gkind] += nbytes
        if self.fill[gkind] >= self.stage.job.bucket_size_bytes:
            self._send(gkind)

    def flush(self):
        for gkind in ("edp", "dp"):
            if self.fill[gkind]:
                self._send(gkind)

    def _send(self, gkind):
        st = self.stage
        op = "all_reduce" if st.job.par.zero_stage == 0 else "reduce_scatter"
        n = self.count[gkind]
        st.last[gkind] = st.emit(f"{self.prefix}/{gkind}-bucket{n}", "collective", chain=False,
                                 extra=(st.last[gkind],), op=op, gkind=gkind, size=self.fill[gkind],
                                 label=f"{gkind} grad bucket {n}")
        self.fill[gkind], self.count[gkind] = 0, n + 1


def _microbatch_order(schedule, pp, p, m):
    """The (phase, microbatch) order a stage runs: 1F1B (PipeDream-Flush) or GPipe."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(pp - p - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


@dataclass
class _Job:
    model: Model
    par: ParallelConfig
    costs: _Costs
    algorithms: dict
    iterations: int
    bucket_size_bytes: int
    dtype: str
    grad_dtype: str

    @property
    def group_size(self):
        par = self.par
        return {"tp": par.tp, "dp": par.dp, "ep": par.ep, "edp": par.dp // par.ep if self.model.moe else 1}


def estimated_ops(model: Model, par: ParallelConfig, iterations: int) -> int:
    """An upper bound on the distinct ops `generate` makes (every stage's stream), known up front."""
    tp_ops = (2 if par.tp > 1 else 0) * (2 if par.sequence_parallel else 1)
    per_layer = 2 + tp_ops + (par.zero_stage == 3 and par.dp > 1) + (2 if model.moe and par.ep > 1 else 0)
    layers = model.layers // par.pp
    buckets = 2 * layers + 2  # dp and edp gradient buckets: every micro-batch from ZeRO-2, else the last
    per_mb = 2 * (layers * per_layer + 2) + (buckets if par.zero_stage >= 2 else 0)
    per_stage = par.microbatches * per_mb + buckets + 8
    return iterations * par.pp * per_stage


def check_size(model: Model, par: ParallelConfig, iterations: int) -> None:
    """InputError naming the key when a job would be beyond the workload layer's limits."""
    if par.world > MAX_RANKS:
        raise InputError("gpus", f"at most {MAX_RANKS} GPUs (the workload layer's limit)", par.world)
    if iterations > MAX_ITERATIONS:
        raise InputError("iterations", f"at most {MAX_ITERATIONS}", iterations)
    est = estimated_ops(model, par, iterations)
    if est > MAX_DISTINCT_OPS:
        key = "iterations" if iterations > 1 else "microbatches"
        per = estimated_ops(model, par, 1)
        value = iterations if key == "iterations" else par.microbatches
        raise InputError(key, f"a trace of at most {MAX_DISTINCT_OPS} distinct ops (one iteration of "
                         f"{model.name} with {par.microbatches} micro-batches over pp={par.pp} is about {per})",
                         f"{value}, about {est} ops")


def layout_of(par: ParallelConfig, moe: bool) -> Layout:
    """The job's parallel layout with the group families it communicates over."""
    size = {"tp": par.tp, "dp": par.dp, "ep": par.ep if moe else 1, "edp": par.dp // par.ep if moe else 1}
    fams = tuple(f for f in ("tp", "dp", "ep", "edp") if size[f] > 1)
    return dataclasses.replace(par.layout, families=fams)


def generate(model: Model, par: ParallelConfig, *, gpu: str = "a100", efficiency: float = 0.45,
             dtype: str = "bf16", grad_dtype: str = "fp32", iterations: int = 1,
             bucket_size_bytes: int | None = None, algorithms: dict | None = None, recompute: bool = False,
             gpus_per_server: int | None = None) -> Trace:
    """One rank class per pipeline stage, `iterations` training iterations (no validation: see
    Trace.validate)."""
    check_size(model, par, iterations)
    algorithms = {"tp": "ring", "dp": "ring", "ep": "ring", "edp": "ring", **(algorithms or {})}
    if bucket_size_bytes is None:  # Megatron DDP: buckets of 40M parameters
        bucket_size_bytes = MEGATRON_BUCKET_PARAMS * DTYPE_BYTES[grad_dtype]
    job = _Job(model, par, _costs(model, par, GPUS[gpu], efficiency, dtype, grad_dtype, recompute),
               algorithms, iterations, bucket_size_bytes, dtype, grad_dtype)
    layout = layout_of(par, model.moe)
    classes = []
    with _no_gc():
        for p in range(par.pp):
            stream = [Op(e[_ID], e[_KIND], e[_DEPS], e[_DUR], e[_OP], e[_ALG], e[_GKIND], e[_SIZE],
                         None if e[_PEER] is None else f"pp{e[_PEER]:+d}", e[_IT], e[_LABEL])
                      for e in _StageBuilder(job, p).build()]
            classes.append(RankClass(layout.select({"pp": [p]}), stream, f"stage{p}", {"pp": [p]}))
    largest = max((o.size_bytes for c in classes for o in c.ops), default=0)
    if largest > MAX_SIZE_BYTES:  # written unchecked (see --validate), so say it here
        raise InputError("micro_batch_size" if par.micro_batch_size > 1 else "model",
                         f"messages that fit 64 bits (at most {MAX_SIZE_BYTES} bytes)", f"{largest} bytes")
    meta = {
        "workload": "model", "model": model.name, "gpu": gpu, "efficiency": efficiency, "dtype": dtype,
        "grad_dtype": grad_dtype, "tp": par.tp, "pp": par.pp, "dp": par.dp, "ep": par.ep,
        "microbatches": par.microbatches, "micro_batch_size": par.micro_batch_size,
        "global_batch": par.microbatches * par.micro_batch_size * par.dp, "zero_stage": par.zero_stage,
        "schedule": par.schedule, "rank_order": "-".join(par.rank_order),
        "sequence_parallel": par.sequence_parallel, "recompute": recompute, "iterations": iterations,
        "bucket_size_bytes": bucket_size_bytes, "algorithms": algorithms,
    }
    if gpus_per_server is not None:
        meta["gpus_per_server"] = gpus_per_server
    return Trace(par.world, {}, meta=meta, classes=classes, layout=layout)


# ---- the experiment file's form -----------------------------------------------------------------

def model_workload(spec: dict, nranks: int, *, gpus_per_server: int | None = None, file=None,
                   validate: bool = True) -> Trace:
    r = SpecReader(spec, file=file)
    model = model_from_spec(r.get("model"), key=r.key("model"), file=file)
    tp = r.int("tp", 1, minimum=1)
    pp = r.int("pp", 1, minimum=1)
    if r.has("dp"):
        dp = r.int("dp", minimum=1)
    else:
        if nranks % (tp * pp):
            raise r.error("tp", f"tp x pp dividing the {nranks} GPUs", f"{tp} x {pp}")
        dp = nranks // (tp * pp)
    ep = r.int("ep", 1, minimum=1)
    mbs = r.int("micro_batch_size", 1, minimum=1)
    microbatches = _microbatches(r, model, dp, mbs)
    order = r.str("rank_order", "tp-dp-pp")
    if sorted(order.split("-")) != sorted(DIMS):
        raise r.error("rank_order", "an order of tp, dp, pp joined by '-' (fastest first), e.g. tp-dp-pp", order)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep, microbatches=microbatches, micro_batch_size=mbs,
                         zero_stage=r.int("zero_stage", 0, minimum=0, maximum=3),
                         schedule=r.choice("schedule", SCHEDULES, "1f1b"), rank_order=tuple(order.split("-")),
                         sequence_parallel=_bool(r, "sequence_parallel", False))
    check_parallel(model, par, nranks, r.error)
    kw = dict(
        gpu=r.choice("gpu", tuple(GPUS), "a100"),
        efficiency=r.number("efficiency", 0.45, strict=True),
        dtype=r.choice("dtype", tuple(DTYPE_BYTES), "bf16"),
        grad_dtype=r.choice("grad_dtype", tuple(DTYPE_BYTES), "fp32"),
        iterations=r.int("iterations", 1, minimum=1, maximum=MAX_ITERATIONS),
        bucket_size_bytes=r.int("bucket_size_bytes", None, minimum=1),
        recompute=_bool(r, "recompute", False),
        algorithms=_algorithms(r, par, gpus_per_server),
        gpus_per_server=gpus_per_server,
    )
    if kw["efficiency"] > 1:
        raise r.error("efficiency", "a fraction of peak in (0, 1]", kw["efficiency"])
    r.done()
    try:
        check_size(model, par, kw["iterations"])
        trace = generate(model, par, **kw)
    except InputError as e:  # micro-batches that come from global_batch: name what the user wrote
        key = "global_batch" if e.key == "microbatches" and r.has("global_batch") else e.key
        raise r.error(key, e.expected, e.found) from None
    _check_hierarchical(r, trace, kw["algorithms"], gpus_per_server)
    if validate:
        trace.validate(file=file)
    return trace


def _check_hierarchical(r, trace, algorithms, gpus_per_server):
    """Hierarchical needs each group laid out server by server, with inter-server peers on one rail."""
    lay = trace.layout
    for kind, alg in algorithms.items():
        if alg != "hierarchical" or kind not in lay.families:
            continue
        # A family's groups are one pattern of offsets moved around: one group per place in a server.
        firsts = np.unique(lay.group_first(kind, np.arange(trace.nranks)))
        for i in np.unique(firsts % gpus_per_server, return_index=True)[1].tolist():
            gi = int(lay.group_index(kind, firsts[i]))
            ranks = lay.group_members(kind, gi)
            if effective_gpus_per_server(ranks, gpus_per_server) is None:
                raise r.error("algorithm", f"{kind} groups laid out server by server on the same rails for "
                              f"hierarchical (gpus_per_server={gpus_per_server})",
                              f"{lay.group_name(kind, gi)} = {ranks[:8]}")


def _bool(r, key, default):
    v = r.get(key, default)
    if not isinstance(v, bool):
        raise r.error(key, "true or false", v)
    return v


def _microbatches(r, model, dp, mbs):
    if r.has("global_batch"):
        gb = r.int("global_batch", minimum=1)
        if gb % (dp * mbs):
            raise r.error("global_batch", f"a multiple of dp x micro_batch_size = {dp * mbs}", gb)
        if r.has("microbatches") and r.int("microbatches", minimum=1) != gb // (dp * mbs):
            raise r.error("microbatches", f"global_batch / (dp x micro_batch_size) = {gb // (dp * mbs)}",
                          r.get("microbatches"))
        return gb // (dp * mbs)
    if r.has("microbatches"):
        return r.int("microbatches", minimum=1)
    gb = PUBLISHED_GLOBAL_BATCH.get(model.name) if PRESETS.get(model.name) == model else None
    if gb is None:
        raise r.error("microbatches", "a value (or global_batch) for an inline model", "nothing")
    if gb % (dp * mbs):
        raise r.error("microbatches", f"a value: the published global batch {gb} does not split over "
                      f"dp x micro_batch_size = {dp * mbs}", "nothing")
    return gb // (dp * mbs)


def _algorithms(r, par, gpus_per_server):
    """`algorithm: ring` for every group, or a mapping per group kind {tp:, dp:, ep:}."""
    v = r.get("algorithm", "ring")
    if isinstance(v, str):
        v = {"tp": v, "dp": v, "ep": v}
    if not isinstance(v, dict):
        raise r.error("algorithm", "an algorithm name or a mapping of tp/dp/ep to one", v)
    sub = SpecReader(v, prefix=r.key("algorithm"), file=r.file)
    out = {k: sub.choice(k, ALGORITHMS, "ring") for k in ("tp", "dp", "ep")}
    sub.done()
    out["edp"] = out["dp"]
    for kind, alg in out.items():
        if alg == "hierarchical" and not gpus_per_server:
            raise r.error("algorithm", "gpus_per_server known to the job for hierarchical (set it on the fabric)",
                          f"{kind}: hierarchical")
    return out
