"""Model workloads: Megatron rank order, per-GPU streams, and bytes derived from tensor shapes."""

import pytest

from badinput import InputError
from traffic.models import PRESETS, attention_flops, total_params
from traffic.parallel import ParallelConfig, _microbatch_order
from traffic.workload import build_workload

SMALL = {"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 4}


def _small(**kw):
    return build_workload({**SMALL, **kw}, 8)


def _colls(ops, op=None, prefix=""):
    return [o for o in ops if o.kind == "collective" and (op is None or o.op == op) and o.group.startswith(prefix)]


def test_megatron_rank_order_tp_fastest():
    t = _small()
    assert t.groups["tp-p0-d0"] == [0, 1] and t.groups["tp-p0-d1"] == [2, 3]
    assert t.groups["dp-p0-t0"] == [0, 2] and t.groups["dp-p1-t1"] == [5, 7]
    sends = [o for o in t.ops[0] if o.kind == "send"]
    assert sends and {o.peer for o in sends} == {4}  # next stage, same tp and dp index
    assert {o.peer for o in t.ops[5] if o.kind in ("send", "recv")} == {1}


def test_rank_order_is_configurable():
    t = _small(rank_order="dp-tp-pp")
    assert t.groups["dp-p0-t0"] == [0, 1] and t.groups["tp-p0-d0"] == [0, 2]
    par = ParallelConfig(tp=2, pp=3, dp=4, rank_order=("pp", "tp", "dp"))
    assert sorted(par.rank(*par.coords(r)) for r in range(24)) == list(range(24))


def test_small_gpt_counts_follow_the_model():
    t = _small()
    m = PRESETS["gpt-small"]
    layers_per_stage, mb = m.layers // 2, 4
    ops = t.ops[0]
    tp = _colls(ops, prefix="tp-")
    assert len(tp) == 4 * layers_per_stage * mb  # 2 forward + 2 backward per layer
    assert {o.size_bytes for o in tp} == {m.seq_len * m.hidden * 2}  # b x s x h in bf16
    assert sum(o.kind == "send" for o in ops) == mb and sum(o.kind == "recv" for o in ops) == mb
    assert all(o.size_bytes == m.seq_len * m.hidden * 2 for o in ops if o.kind in ("send", "recv"))


def test_dp_grad_bytes_add_up_to_the_model():
    t = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 2}, 8)
    m = PRESETS["gpt-small"]
    # one rank per (tp, pp) coordinate holds a distinct shard of the parameters
    grad_bytes = sum(o.size_bytes for r in (0, 1, 4, 5) for o in _colls(t.ops[r], "all_reduce", "dp-"))
    tied_extra = m.vocab * m.hidden  # the tied embedding lives on the first and the last stage
    assert grad_bytes / 4 == pytest.approx(total_params(m) + tied_extra, rel=0.01)


def test_buckets_overlap_backward_and_only_the_optimizer_waits():
    t = build_workload({**SMALL, "bucket_size_bytes": 4 * 2**20}, 8)
    ops = t.ops[0]
    buckets = _colls(ops, "all_reduce", "dp-")
    assert len(buckets) > 3
    first = ops.index(buckets[0])
    last_bwd = max(i for i, o in enumerate(ops) if o.kind == "compute" and "bwd" in o.label)
    assert first < last_bwd  # issued while backward is still running
    waiting = [o for o in ops if any(d.startswith(buckets[-1].id) for d in o.deps)]
    assert [o.label for o in waiting] == ["optimizer step"]
    assert all(b.id.startswith("i0/b3/") for b in buckets)  # synced once, after the last micro-batch


def test_1f1b_and_gpipe_orders():
    assert _microbatch_order("1f1b", 4, 0, 6) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4),
                                                  ("B", 1), ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5)]
    assert _microbatch_order("1f1b", 4, 3, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    assert _microbatch_order("gpipe", 2, 0, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    for sched in ("1f1b", "gpipe"):
        t = _small(schedule=sched, iterations=2)
        last_stage = [o.label.split()[-1] for o in t.ops[4] if o.kind == "compute" and o.label.startswith("logits")]
        assert len(last_stage) == 16


def test_compute_durations_come_from_flops():
    t = build_workload({"model": "gpt-small", "tp": 2, "microbatches": 1, "gpu": "h100", "efficiency": 0.5}, 2)
    m = PRESETS["gpt-small"]
    attn = next(o for o in t.ops[0] if o.label == "attn fwd L0")
    assert attn.duration_s == pytest.approx(attention_flops(m, m.seq_len) / 2 / (989e12 * 0.5))
    bwd = next(o for o in t.ops[0] if o.label == "attn bwd L0")
    assert bwd.duration_s == pytest.approx(2 * attn.duration_s)
    rec = build_workload({"model": "gpt-small", "tp": 2, "microbatches": 1, "gpu": "h100", "efficiency": 0.5,
                          "recompute": True}, 2)
    assert next(o for o in rec.ops[0] if o.label == "attn bwd L0").duration_s == pytest.approx(3 * attn.duration_s)


def test_dtype_sets_the_bytes():
    a = build_workload({**SMALL, "dtype": "fp32"}, 8)
    b = build_workload({**SMALL, "dtype": "fp16"}, 8)
    assert _colls(a.ops[0], prefix="tp-")[0].size_bytes == 2 * _colls(b.ops[0], prefix="tp-")[0].size_bytes


def test_sequence_parallel_uses_gather_and_scatter():
    t = _small(sequence_parallel=True)
    ops = {o.op for o in _colls(t.ops[0], prefix="tp-")}
    assert ops == {"all_gather", "reduce_scatter"}
    send = next(o for o in t.ops[0] if o.kind == "send")
    assert send.size_bytes == PRESETS["gpt-small"].seq_len * 768 * 2 // 2


@pytest.mark.parametrize("stage,expect", [
    (0, {"all_reduce"}),
    (1, {"reduce_scatter", "all_gather"}),
    (2, {"reduce_scatter", "all_gather"}),
    (3, {"reduce_scatter", "all_gather"}),
])
def test_zero_stages(stage, expect):
    t = _small(zero_stage=stage)
    dp = _colls(t.ops[0], prefix="dp-")
    assert {o.op for o in dp} == expect
    rs_mbs = {o.id.split("/")[1] for o in dp if o.op == "reduce_scatter"}
    ag = [o for o in dp if o.op == "all_gather"]
    if stage == 1:
        assert rs_mbs == {"b3"} and len(ag) == 1
    if stage == 2:
        assert rs_mbs == {"b0", "b1", "b2", "b3"} and len(ag) == 1  # reduced at every micro-batch
    if stage == 3:
        assert len(ag) == 2 * 6 * 4  # gathered per layer, forward and backward, every micro-batch


def test_moe_expert_parallel_all_to_all():
    t = build_workload({"model": "mixtral-8x7b", "tp": 2, "pp": 2, "dp": 4, "ep": 2, "microbatches": 2}, 16)
    m = PRESETS["mixtral-8x7b"]
    a2a = _colls(t.ops[0], "all_to_all")
    assert len(a2a) == 4 * (m.layers // 2) * 2  # dispatch + combine, forward and backward
    assert {o.size_bytes for o in a2a} == {m.seq_len * m.top_k * m.hidden * 2}
    assert t.groups[a2a[0].group] == [0, 2]  # two consecutive dp ranks, same tp index
    edp = _colls(t.ops[0], prefix="edp-")
    assert edp and t.groups[edp[0].group] == [0, 4]
    assert all(o.op == "all_reduce" for o in edp)


def test_generation_is_deterministic_and_valid():
    spec = {"model": "llama2-70b", "tp": 4, "pp": 4, "dp": 2, "microbatches": 8, "zero_stage": 1}
    a, b = build_workload(spec, 32), build_workload(spec, 32)
    assert a == b
    a.validate()


def test_dp_defaults_and_published_batch():
    t = build_workload({"model": "gpt-small", "tp": 2, "pp": 2}, 8)
    assert t.meta["dp"] == 2 and t.meta["microbatches"] == 256 // 2 and t.meta["global_batch"] == 256


def test_inline_model():
    spec = {"model": {"layers": 4, "hidden": 256, "ffn_hidden": 1024, "heads": 4, "seq_len": 128, "vocab": 1000},
            "tp": 2, "pp": 2, "microbatches": 2}
    t = build_workload(spec, 4)
    assert t.meta["model"] == "inline"
    derived = {"model": {"preset": "gpt-small", "layers": 4}, "pp": 2, "microbatches": 2}
    assert build_workload(derived, 2).meta["model"] == "gpt-small"


@pytest.mark.parametrize("spec,nranks,msg", [
    ({**SMALL, "dp": 4}, 8, "workload.dp: expected tp x pp x dp = 8 GPUs, found 2 x 2 x 4 = 16"),
    ({**SMALL, "pp": 5, "dp": 1, "tp": 1}, 5, "workload.pp: expected a divisor of the model's 12 layers"),
    ({**SMALL, "tp": 8, "dp": 1, "pp": 1}, 8, "workload.tp: expected a divisor of heads=12"),
    ({"model": "mixtral-8x7b", "tp": 1, "dp": 6, "ep": 4, "microbatches": 1}, 6, "workload.ep: expected a divisor of dp=6"),
    ({"model": "mixtral-8x7b", "dp": 6, "ep": 3, "microbatches": 1}, 6, "workload.ep: expected a divisor of the model's experts=8"),
    ({**SMALL, "flavour": 1}, 8, "workload.flavour: expected a known key"),
    ({**SMALL, "model": "gpt5"}, 8, "workload.model: expected a preset"),
    ({**SMALL, "zero_stage": 4}, 8, "workload.zero_stage: expected an integer >= 0 and <= 3"),
    ({**SMALL, "schedule": "interleaved"}, 8, "workload.schedule: expected one of 1f1b, gpipe"),
    ({**SMALL, "rank_order": "tp-pp"}, 8, "workload.rank_order"),
    ({**SMALL, "global_batch": 7}, 8, "workload.global_batch: expected a multiple of dp x micro_batch_size = 2"),
    ({**SMALL, "global_batch": 16}, 8, "workload.microbatches: expected global_batch / (dp x micro_batch_size) = 8"),
    ({**SMALL, "algorithm": "hierarchical"}, 8, "workload.algorithm: expected gpus_per_server"),
    ({**SMALL, "algorithm": {"tp": "ring", "pp": "ring"}}, 8, "workload.algorithm.pp: expected a known key"),
    ({**SMALL, "efficiency": 1.5}, 8, "workload.efficiency"),
    ({"model": {"layers": 2, "hidden": 10, "ffn_hidden": 4, "heads": 3, "seq_len": 4, "vocab": 9}, "microbatches": 1},
     1, "workload.model.heads: expected a divisor of hidden=10"),
    ({"model": {"layers": 2, "hidden": 12, "ffn_hidden": 4, "heads": 3, "seq_len": 4, "vocab": 9}}, 1,
     "workload.microbatches: expected a value (or global_batch) for an inline model"),
])
def test_inconsistent_configs_are_rejected(spec, nranks, msg):
    with pytest.raises(InputError) as e:
        build_workload(spec, nranks, file="exp.yaml")
    assert f"exp.yaml: {msg}" in str(e.value), str(e.value)


def test_hierarchical_when_groups_sit_on_rails():
    t = build_workload({**SMALL, "algorithm": {"dp": "hierarchical"}}, 8, gpus_per_server=2)
    assert {o.algorithm for o in _colls(t.ops[0], prefix="dp-")} == {"hierarchical"}
    with pytest.raises(InputError, match="laid out server by server"):
        build_workload({**SMALL, "algorithm": {"dp": "hierarchical"}}, 8, gpus_per_server=3)  # dp-p0-t1 = [1, 3]


def test_a_job_is_one_class_per_stage_with_groups_and_peers_by_rule():
    t = _small()  # tp 2, pp 2, dp 2
    assert [c.name for c in t.classes] == ["stage0", "stage1"]
    assert [list(c.ranks) for c in t.classes] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    stream = t.classes[0].ops
    assert {o.group for o in stream if o.kind == "collective"} == {"tp", "dp"}
    assert {o.peer for o in stream if o.kind in ("send", "recv")} == {"pp+1"}
    a, b = t.ops_of(0), t.ops_of(1)  # one tp group, two dp groups and pipeline peers: only those differ
    differ = [x for x, y in zip(a, b) if x != y]
    assert {x.kind for x in differ} == {"collective", "send", "recv"}
    assert all(x.group.startswith("dp-") for x in differ if x.kind == "collective")
    assert sum(x is y for x, y in zip(a, b)) == sum(not t.is_symbolic(o) for o in stream)  # shared, not copied


@pytest.mark.parametrize("pp", [1, 2, 3, 4])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("microbatches", [1, 2, 5])
def test_every_schedule_is_deadlock_free(pp, schedule, microbatches):
    # validate() merges each collective and send/recv pair across ranks and rejects any cycle.
    model = {"layers": 12, "hidden": 64, "ffn_hidden": 128, "heads": 4, "seq_len": 16, "vocab": 100,
             "experts": 4, "top_k": 2}
    for zero in (0, 1, 3):
        t = build_workload({"model": model, "tp": 2, "pp": pp, "dp": 2, "ep": 2, "zero_stage": zero,
                            "schedule": schedule, "microbatches": microbatches, "iterations": 2,
                            "bucket_size_bytes": 20000}, 4 * pp)
        t.validate()
        assert {o.iteration for ops in t.ops.values() for o in ops} == {0, 1}


@pytest.mark.parametrize("spec,nranks,gps", [
    ({**SMALL}, 8, None),
    ({**SMALL, "zero_stage": 3, "sequence_parallel": True, "algorithm": "halving-doubling"}, 8, None),
    ({"model": "mixtral-8x7b", "tp": 2, "pp": 1, "dp": 4, "ep": 2, "microbatches": 1,
      "algorithm": {"tp": "hierarchical", "dp": "tree", "ep": "direct"}}, 8, 4),
])
def test_every_collective_in_a_job_has_a_correct_schedule(spec, nranks, gps):
    from traffic.collectives import build_schedule, effective_gpus_per_server, verify
    t = build_workload(spec, nranks, gpus_per_server=gps)
    seen = set()
    for ops in t.ops.values():
        for o in ops:
            if o.kind != "collective":
                continue
            ranks = t.groups[o.group]
            g = effective_gpus_per_server(ranks, gps) if o.algorithm == "hierarchical" else None
            key = (o.op, o.algorithm, len(ranks), min(o.size_bytes, 4096), g)
            if key in seen:
                continue
            seen.add(key)
            verify(build_schedule(o.op, o.algorithm, len(ranks), min(o.size_bytes, 4096), root=o.root or 0,
                                  gpus_per_server=g))
    assert seen
