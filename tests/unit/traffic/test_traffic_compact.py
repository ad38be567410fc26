"""The compact trace: layout rules, classes, expand/compact as exact inverses, and validation and
analysis on the classes agreeing with the per-rank form they stand for."""
import itertools
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from badinput import InputError
from traffic.analysis import bytes_by_collective, critical_path, ring_time_s
from traffic.collectives import build_schedule, predict_time_s
from traffic.importers import aicb
from traffic.layout import FAMILIES, Layout, decode_runs, encode_runs, parse_peer, peer_rule
from traffic.models import PRESETS
from traffic.trace import Op, RankClass, Trace, compact, expand, load
from traffic.validate import class_graph
from traffic.workload import build_workload

DATA = pathlib.Path(__file__).parents[2] / "data"
LAYOUTS = [Layout(2, 4, 3, 2, order, FAMILIES) for order in itertools.permutations(("tp", "dp", "pp"))] + \
    [Layout(1, 6, 1, 3, ("tp", "dp", "pp"), FAMILIES), Layout(8, 1, 2, 1, ("dp", "pp", "tp"), FAMILIES)]


# ---- the layout's rules ----------------------------------------------------------------------

@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda x: "-".join(x.order) + f"-ep{x.ep}")
def test_every_family_partitions_the_ranks_by_its_rule(lay):
    ranks = np.arange(lay.nranks)
    t, d, p = lay.coords(ranks)
    assert (lay.rank(t, d, p) == ranks).all()
    for f in FAMILIES:
        seen = []
        for i in range(lay.group_count(f)):
            members = lay.group_members(f, i)
            assert len(members) == lay.family_size(f)
            assert list(lay.group_index(f, members)) == [i] * len(members)
            assert list(lay.local_rank(f, members)) == list(range(len(members)))
            assert list(lay.group_first(f, members)) == [members[0]] * len(members)
            assert lay.parse_group(lay.group_name(f, i)) == (f, i)
            seen += members
        assert sorted(seen) == list(range(lay.nranks))
    # The families' meaning: tp groups hold one (d, p); ep groups consecutive dp indices.
    g0 = lay.group_members("ep", 0)
    assert [lay.coords(r)[1] for r in g0] == list(range(lay.ep))
    assert lay.parse_group("tp-p0-d00") is None and lay.parse_group(f"tp-p{lay.pp}-d0") is None


@pytest.mark.parametrize("lay", LAYOUTS[:3])
def test_peer_rules_shift_one_coordinate_and_wrap(lay):
    ranks = np.arange(lay.nranks)
    nxt = lay.shift(ranks, "pp", 1)
    assert (lay.shift(nxt, "pp", -1) == ranks).all()
    assert (lay.coords(nxt)[2] == (lay.coords(ranks)[2] + 1) % lay.pp).all()
    assert (lay.coords(nxt)[0] == lay.coords(ranks)[0]).all()
    for r, q in [(0, int(nxt[0])), (5, int(lay.shift(5, "dp", -1)))]:
        rule = peer_rule(lay, r, q)
        assert int(lay.shift(r, *parse_peer(rule))) == q
    assert parse_peer("pp+0") is None and parse_peer("xp+1") is None and parse_peer(3) is None
    assert list(lay.select({"pp": [1]})) == sorted(ranks[lay.coords(ranks)[2] == 1])


def test_rank_runs_round_trip_and_refuse_huge_runs():
    for ranks in ([], [3], [0, 1, 2, 7, 9, 10], list(range(5, 0, -1))):
        assert decode_runs(encode_runs(ranks), 100).tolist() == ranks
    assert encode_runs([0, 1, 2, 7]) == [[0, 3], 7]
    assert decode_runs([[0, 10 ** 15]], 1000) == "at most 1000 ranks"
    assert isinstance(decode_runs([[5, 2]], 10), str) and isinstance(decode_runs("x", 10), str)


# ---- expand(compact(t)) == t ---------------------------------------------------------------------

PRESET_JOBS = {
    "gpt-small": ({"tp": 2, "pp": 2, "dp": 2, "microbatches": 3}, 8),
    "gpt3-13b": ({"tp": 2, "pp": 4, "microbatches": 2, "zero_stage": 1}, 16),
    "gpt3-175b": ({"tp": 8, "pp": 8, "microbatches": 2}, 64),
    "llama2-70b": ({"tp": 4, "pp": 2, "microbatches": 2, "sequence_parallel": True}, 16),
    "mixtral-8x7b": ({"tp": 2, "pp": 2, "ep": 2, "microbatches": 2, "zero_stage": 3}, 16),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_expands_and_compacts_back_exactly(name):
    spec, n = PRESET_JOBS[name]
    t = build_workload({"model": name, **spec}, n)
    full = expand(t)
    assert len(full.classes) == n and full.layout is None and full == t
    back = compact(full)
    assert back == t and expand(back) == full
    assert len(back.classes) == len(t.classes) == spec.get("pp", 1)  # the stages, found again
    assert back.layout.families == t.layout.families and not back.explicit


def _imported():
    """Every importer's test trace: the Chakra and Kineto fixtures of their own tests, AICB's here, and the
    real PyTorch traces."""
    from tests.unit.traffic import test_traffic_chakra as ch, test_traffic_kineto as kn
    from traffic.importers import chakra, kineto
    import tempfile
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "c").mkdir()
    (d / "k").mkdir()
    yield "chakra", chakra.load(ch._write_ranks(d / "c"))
    yield "kineto", kineto.load(kn._write(d / "k", [kn._rank_events(0), kn._rank_events(1)]))
    for name, text in AICB_FILES.items():
        (d / name).write_text(text)
        yield f"aicb-{name}", aicb.load([str(d / name)])
    for p in sorted((DATA / "v1").glob("*.json")):
        yield p.name, load(p)
    # Real torch.distributed jobs (tests/data/torch): profiler and execution traces.
    from tests.unit.traffic.test_traffic_torch_traces import _files
    from traffic.importers import pytorch_et
    for job in ("ddp", "two-pg"):
        yield f"torch-kineto-{job}", kineto.load(_files(job, "kineto"))
        yield f"torch-et-{job}", pytorch_et.load(_files(job, "et"), kineto=_files(job, "kineto"))


ROWS = ["emb -1 1000 ALLREDUCE 4096 1000 NONE 0 3000 NONE 0 10",
        "attn -1 2000 ALLREDUCE 8192 2000 ALLREDUCE 8192 2000 NONE 0 10",
        "mlp -1 3000 ALLTOALL_EP 2048 3000 ALLTOALL_EP 2048 3000 NONE 0 10",
        "attn -1 2000 ALLREDUCE 8192 2000 ALLREDUCE 8192 2000 NONE 0 10",
        "mlp -1 3000 ALLTOALL_EP 2048 3000 ALLTOALL_EP 2048 3000 NONE 0 10",
        "final -1 500 ALLGATHER 4096 500 REDUCESCATTER 4096 500 NONE 0 10"]


def _aicb(header, rows):
    return "\n".join([header, str(len(rows)), *rows]) + "\n"


_H = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 2 pp: {pp} vpp: {vpp} ga: {ga} " \
     "all_gpus: {n} checkpoints: 0 checkpoint_initiates: 0 pp_comm: 65536"
AICB_FILES = {
    "pp1": _aicb(_H.format(pp=1, vpp=1, ga=1, n=8).replace(" pp_comm: 65536", ""),
                 ROWS + ["grad -1 1 NONE 0 1 NONE 0 1 REDUCESCATTER_DP_EP 99 10"]),
    "gpipe": _aicb(_H.format(pp=2, vpp=1, ga=3, n=16),
                   ["norm -1 1 NONE 0 1 NONE 0 1 ALLGATHER 64 1"] + ROWS * 3 + ["opt -1 0 ALLREDUCE 4 0 NONE 0 0 NONE 0 1"]),
    "interleaved": _aicb(_H.format(pp=2, vpp=2, ga=2, n=16), ROWS * 2),
}


@pytest.mark.parametrize("name,t", list(_imported()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_imported_test_trace_expands_and_compacts_back_exactly(name, t):
    t.validate()
    full = expand(t)
    assert full == t and compact(full) == t and expand(compact(t)) == full


# Random parallel jobs: the generator's compact form equals its per-rank expansion, both ways.
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["gpt-small", "mixtral-8x7b"]), tp=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 4]), ep=st.sampled_from([1, 2]),
       zero=st.integers(0, 3), mb=st.integers(1, 3), schedule=st.sampled_from(["1f1b", "gpipe"]),
       order=st.sampled_from(["tp-dp-pp", "dp-tp-pp", "pp-dp-tp"]), sp=st.booleans(), iterations=st.integers(1, 2))
def test_random_jobs_round_trip(model, tp, pp, dp, ep, zero, mb, schedule, order, sp, iterations):
    assume(not dp % ep and not (sp and tp == 1) and (ep == 1 or model == "mixtral-8x7b"))
    assume(tp * pp * dp <= (16 if model == "mixtral-8x7b" else 32))
    spec = {"model": model, "tp": tp, "pp": pp, "dp": dp, "ep": ep, "zero_stage": zero, "microbatches": mb,
            "schedule": schedule, "rank_order": order, "sequence_parallel": sp, "iterations": iterations}
    t = build_workload(spec, tp * pp * dp)
    full = expand(t)
    assert full == t and compact(full) == t
    assert bytes_by_collective(full) == bytes_by_collective(t)
    assert critical_path(t).total_s == pytest.approx(critical_path(full).total_s, rel=1e-12)


def test_classes_do_not_grow_with_the_gpu_count():
    small = build_workload({"model": "gpt3-175b", "tp": 8, "pp": 8, "microbatches": 4}, 512)
    big = build_workload({"model": "gpt3-175b", "tp": 8, "pp": 8, "microbatches": 4}, 131072)
    assert len(small.classes) == len(big.classes) == 8
    assert small.distinct_ops() == big.distinct_ops()
    assert big.op_count() == 256 * small.op_count()
    last = big.ops_of(131071)  # t 7, d 2047, p 7: concrete groups and peers, on request
    assert {o.group for o in last if o.kind == "collective"} == {"tp-p7-d2047", "dp-p7-t7"}
    assert {o.peer for o in last if o.kind in ("send", "recv")} == {131071 - 8 * 2048}
    assert big.members("dp-p7-t7")[:3] == [7 + 7 * 16384, 15 + 7 * 16384, 23 + 7 * 16384]
    seq = big.ops[np.int64(131071)]  # lazy: its length costs nothing; indexing makes it once
    assert len(seq) == len(last) and seq[5] is seq[5] and list(seq) == last


# ---- validation: the same verdicts on the classes as rank by rank --------------------------------

def _mutations(t):
    """(description, function of a per-rank trace) that each break one rank's stream."""
    yield "drop", lambda f, r, i: f.ops[r].pop(i)
    yield "size", lambda f, r, i: setattr(f.ops[r][i], "size_bytes", f.ops[r][i].size_bytes + 1)
    yield "dep", lambda f, r, i: setattr(f.ops[r][i], "deps", f.ops[r][i].deps + ("ghost",))
    yield "op", lambda f, r, i: setattr(f.ops[r][i], "op", "broadcast")
    yield "peer", lambda f, r, i: setattr(f.ops[r][i], "peer", (f.ops[r][i].peer or 0) + 1)
    yield "loop", lambda f, r, i: setattr(f.ops[r][0], "deps", f.ops[r][0].deps + (f.ops[r][-1].id,))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_broken_rank_is_rejected_on_the_classes_as_rank_by_rank(data):
    spec, n = data.draw(st.sampled_from([({"model": "gpt-small", "tp": 2, "pp": 2, "microbatches": 2}, 8),
                                          ({"model": "mixtral-8x7b", "tp": 1, "pp": 2, "ep": 2, "microbatches": 1}, 4),
                                          ({"collective": "all_gather", "size_bytes": 64, "iterations": 2}, 3),
                                          ({"pattern": "stride", "size_bytes": 10}, 4)]))
    t = build_workload(spec, n)
    full = expand(t)
    full = Trace(full.nranks, full.explicit, {r: [_copy(o) for o in full.ops[r]] for r in full.ops}, full.meta)
    r = data.draw(st.integers(0, n - 1))
    i = data.draw(st.integers(0, len(full.ops[r]) - 1))
    _, mutate = data.draw(st.sampled_from(list(_mutations(full))))
    mutate(full, r, i)
    verdicts = []
    for form in (full, compact(full)):
        try:
            form.validate()
            verdicts.append("accepted")
        except InputError as e:
            verdicts.append(str(e))
    assert (verdicts[0] == "accepted") == (verdicts[1] == "accepted"), verdicts


def _copy(o):
    return Op(o.id, o.kind, o.deps, o.duration_s, o.op, o.algorithm, o.group, o.size_bytes, o.peer, o.iteration,
              o.label, o.root)


def test_relay_chain_and_ring():
    """A relay class (recv from pp-1, send to pp+1, the same id on every hop) looks cyclic at class
    level; per rank a chain is fine and a ring is a deadlock."""
    n = 6  # ids alternate by stage parity so that no stream holds a recv and a send of one id

    def streams(ring):
        def relay(p):
            a, b = ("even", "odd") if p % 2 == 0 else ("odd", "even")
            return [Op(b, "recv", size_bytes=8, peer="pp-1"), Op("work", "compute", (b,)),
                    Op(a, "send", ("work",), size_bytes=8, peer="pp+1")]
        lay = Layout(1, 1, n, 1, ("tp", "dp", "pp"), ())
        if ring:
            classes = [RankClass(range(0, n, 2), relay(0)), RankClass(range(1, n, 2), relay(1))]
        else:
            classes = [RankClass([0], [Op("even", "send", size_bytes=8, peer="pp+1")]),
                       RankClass([2, 4], relay(0)), RankClass([1, 3], relay(1)),
                       RankClass([5], [Op("even", "recv", size_bytes=8, peer="pp-1")])]
        return Trace(n, {}, meta={}, layout=lay, classes=classes)

    chain = streams(False)
    assert not class_graph(chain).exact  # a relay's peers lie in two classes
    chain.validate()  # the class-level cycle is no cycle per rank
    assert critical_path(chain).per_class is False
    with pytest.raises(InputError, match="deps: expected no dependency cycle"):
        streams(True).validate()


def test_a_check_that_would_expand_too_far_says_so(monkeypatch):
    import traffic.validate
    n = 6
    lay = Layout(1, 1, n, 1, ("tp", "dp", "pp"), ())
    relay = [Op("odd", "recv", size_bytes=8, peer="pp-1"), Op("even", "send", ("odd",), size_bytes=8, peer="pp+1")]
    relay1 = [Op("even", "recv", size_bytes=8, peer="pp-1"), Op("odd", "send", ("even",), size_bytes=8, peer="pp+1")]
    t = Trace(n, {}, meta={}, layout=lay, classes=[
        RankClass([0], [Op("even", "send", size_bytes=8, peer="pp+1")]), RankClass([2, 4], relay),
        RankClass([1, 3], relay1), RankClass([5], [Op("even", "recv", size_bytes=8, peer="pp-1")])])
    t.validate()
    monkeypatch.setattr(traffic.validate, "MAX_EXPANDED_OPS", 4)
    with pytest.raises(InputError, match="deps: expected a dependency graph dtnet can check"):
        t.validate()


@pytest.mark.parametrize("edit,key", [
    (lambda t: setattr(t.classes[0], "ranks", np.array([1])), "classes: expected collective"),  # rank 0: none
    (lambda t: t.classes.append(RankClass([0], [])), "classes[2].ranks: expected each rank in one class"),
    (lambda t: t.explicit.__setitem__("tp", [0, 1]), "groups.tp: expected a name apart"),
    (lambda t: t.explicit.__setitem__("tp-p0-d0", [0, 1]), "groups.tp-p0-d0: expected a name apart"),
    (lambda t: setattr(t.classes[1].ops[-1], "peer", "pp+2"), "classes[1].ops"),  # stage 1 -> itself
])
def test_compact_structure_is_checked(edit, key):
    t = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 1, "microbatches": 1}, 4)
    t.classes[1].ops.append(Op("last", "send", size_bytes=8, peer="pp+1"))
    t.classes[0].ops.append(Op("last", "recv", size_bytes=8, peer="pp-1"))
    t.validate()
    edit(t)
    t.touched()
    with pytest.raises(InputError) as e:
        t.validate()
    assert str(e.value).startswith(key), str(e.value)


def test_a_group_that_spans_classes_must_agree_across_them():
    t = build_workload({"model": "gpt-small", "tp": 2, "pp": 1, "dp": 1, "microbatches": 1}, 2)
    ops = t.classes[0].ops
    tp_op = next(i for i, o in enumerate(ops) if o.group == "tp")
    lacking = list(ops)
    lacking[tp_op] = Op(ops[tp_op].id, "compute", ops[tp_op].deps)  # rank 1 computes where rank 0 all-reduces
    t.classes = [RankClass([0], ops), RankClass([1], lacking)]
    t.touched()
    with pytest.raises(InputError, match=rf"^classes\[1\].ops: expected collective '{ops[tp_op].id}' of group "
                       r"'tp-p0-d0' on every member \(rank 1\)"):
        t.validate()
    t.classes[1] = RankClass([1], [o if i != tp_op else Op(o.id, o.kind, o.deps, op=o.op, algorithm=o.algorithm,
                                                             group="tp", size_bytes=o.size_bytes + 1, label=o.label)
                                   for i, o in enumerate(ops)], key=None)
    with pytest.raises(InputError, match=r"^classes\[1\].ops\[\d+\]: expected the same op, algorithm, size_bytes"):
        t.validate()


def test_an_explicit_group_must_hold_every_rank_of_the_class():
    t = Trace(4, {"pair": [0, 1]}, meta={}, classes=[
        RankClass([0, 1, 2], [Op("b", "collective", op="all_reduce", group="pair")])])
    with pytest.raises(InputError, match=r"classes\[0\].ops\[0\].group: expected a group that holds rank 2"):
        t.validate()


# ---- analysis on the classes -----------------------------------------------------------------

@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n,size", [(2, 1), (5, 1000), (33, 123457), (64, 1 << 20)])
@pytest.mark.parametrize("intra", [None, 8])
def test_ring_formula_is_the_schedules_time(op, n, size, intra):
    s = build_schedule(op, "ring", n, size)
    split = dict(intra_gbps=900.0, gpus_per_server=intra) if intra else {}
    want = predict_time_s(s, 400.0, 5e-6, **split)
    got = ring_time_s(op, n, size, 400.0, 5e-6, 900.0 if intra else None, intra)
    # With servers, the largest chunk may ride an in-server hop while the fabric hop carries one byte less.
    assert got == pytest.approx(want, rel=1e-9, abs=2 * n * 8 / 400e9)


def test_expert_all_to_alls_are_counted_as_ep_even_when_ep_is_dp():
    t = build_workload({"model": "mixtral-8x7b", "tp": 1, "pp": 1, "ep": 4, "microbatches": 1}, 4)
    kinds = {k for k, _ in bytes_by_collective(t)}
    assert ("ep", "all_to_all") in bytes_by_collective(t) and "dp" in kinds
    assert t.members("ep-p0-t0-g0") == t.members("dp-p0-t0")  # the same ranks, another dimension


def test_explicit_groups_are_named_by_the_dimension_they_span():
    from traffic.analysis import group_kinds
    t = Trace(4, {"pg0": [0, 1], "pg1": [0, 2], "pg7": [0, 1, 2, 3], "odd": [1, 3, 0]}, meta={"tp": 2, "dp": 2},
              classes=[])
    assert group_kinds(t)["pg0"] == "tp" and group_kinds(t)["pg1"] == "dp" and group_kinds(t)["pg7"] == "world"
    assert group_kinds(t)["odd"] == "odd"


def test_fold_and_units():
    from traffic.analysis import fmt_bytes, fold
    assert [fmt_bytes(x) for x in (0, 1023, 1536, 48 << 20, 3 << 40)] == ["0 B", "1023 B", "1.5 KiB", "48.0 MiB",
                                                                         "3.0 TiB"]
    assert fold([("a", 1.0), ("b", 3.0), ("a", 1.0), ("a", 1.0)]) == [("a", 1.0, 3), ("b", 3.0, 1)]
