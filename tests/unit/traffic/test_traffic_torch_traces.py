"""Real torch.distributed traces (tests/data/torch, recorded by scripts/record-torch-traces.py with
torch 2.13, 4 gloo ranks on loopback) imported and checked against what the programs did; the
programs are described in that script's docstring."""
import os

import pytest

from traffic.importers import kineto

DATA = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "data", "torch"))
RANKS = 4
# ddp: DDP buckets after the rebuild, in launch order: layer 2 (256x512 + 256), layer 1 (512x256 + 512), fp32
DDP_BUCKETS = [(256 * 512 + 256) * 4, (512 * 256 + 512) * 4]
assert DDP_BUCKETS == [525312, 526336]
TP_BYTES, DP_BYTES = 64 * 128 * 4, 128 * 128 * 4  # two-pg: the activation and the gradient


def _files(job, kind):
    return [os.path.join(DATA, job, f"{kind}-rank{r}.json.gz") for r in range(RANKS)]


def _closure(ops):
    """op id -> every op id it depends on, directly or not."""
    by_id = {o.id: o for o in ops}
    memo = {}

    def up(i):
        if i not in memo:
            memo[i] = set()
            for d in by_id[i].deps:
                memo[i] |= {d} | up(d)
        return memo[i]
    return {o.id: up(o.id) for o in ops}


def _concurrent(ops, a, b):
    anc = _closure(ops)
    return a not in anc[b] and b not in anc[a]


def _collectives(t, rank):
    return [o for o in t.ops[rank] if o.kind == "collective"]


@pytest.fixture(scope="module")
def ddp():
    return kineto.load(_files("ddp", "kineto"))


@pytest.fixture(scope="module")
def two_pg():
    return kineto.load(_files("two-pg", "kineto"))


def test_ddp_buckets_sizes_group_and_order(ddp):
    assert ddp.groups == {"pg0": [0, 1, 2, 3]}
    for r in range(RANKS):
        coll = _collectives(ddp, r)
        assert [(o.op, o.size_bytes, o.iteration) for o in coll] == \
            [("all_reduce", DDP_BUCKETS[0], 0), ("all_reduce", DDP_BUCKETS[1], 0),
             ("all_reduce", DDP_BUCKETS[0], 1), ("all_reduce", DDP_BUCKETS[1], 1)]


def test_ddp_bucket_overlaps_the_backward_pass(ddp):
    for r in range(RANKS):
        ops = ddp.ops[r]
        anc = _closure(ops)
        for it in (0, 1):
            first, second = [o for o in _collectives(ddp, r) if o.iteration == it]
            compute = [o for o in ops if o.kind == "compute" and o.iteration == it]
            # Bucket 0 waits for the compute before its hook (forward and layer 2's backward)...
            assert sum(o.duration_s for o in compute if o.id in anc[first.id]) > 0
            # ...and runs beside layer 1's backward: compute that neither waits for it nor it for.
            beside = [o for o in compute if _concurrent(ops, o.id, first.id)]
            assert beside and sum(o.duration_s for o in beside) > 0
            # Bucket 1 is launched after the backward that bucket 0 overlapped (layer 1's).
            assert max(beside, key=lambda o: o.duration_s).id in anc[second.id]
            # The optimizer step (last compute of the step) waits for the last bucket; bucket 0
            # often ended before anyone waited (no idle time shows it), so only the next step
            # is sure to wait for it.
            assert second.id in anc[compute[-1].id]
            if it == 0:
                nxt = next(o for o in ops if o.iteration == 1)
                assert {first.id, second.id} <= anc[nxt.id]


def test_two_process_groups_are_told_apart(two_pg):
    by_ranks = {tuple(v): k for k, v in two_pg.groups.items()}
    assert set(by_ranks) == {(0, 1), (2, 3), (0, 2), (1, 3)}  # tp pairs and dp pairs, never the world
    assert "inferred" in two_pg.meta["assumed"]
    for r in range(RANKS):
        tp = by_ranks[tuple(sorted((r, r ^ 1)))]
        dp = by_ranks[tuple(sorted((r, r ^ 2)))]
        assert [(o.op, o.group, o.size_bytes, o.iteration) for o in _collectives(two_pg, r)] == \
            [("all_reduce", tp, TP_BYTES, 0), ("all_reduce", dp, DP_BYTES, 0),
             ("all_reduce", tp, TP_BYTES, 1), ("all_reduce", dp, DP_BYTES, 1)]


def test_two_pg_blocking_and_overlapped_collectives(two_pg):
    for r in range(RANKS):
        ops = two_pg.ops[r]
        anc = _closure(ops)
        coll = _collectives(two_pg, r)
        for it in (0, 1):
            tp, dp = [o for o in coll if o.iteration == it]
            compute = [o for o in ops if o.kind == "compute" and o.iteration == it]
            after_tp = [o for o in compute if tp.id in anc[o.id]]
            assert after_tp and dp.id not in anc[tp.id]  # the blocking tp all-reduce holds the rest up
            assert tp.id in anc[dp.id]
            # The async dp all-reduce overlaps the compute issued after it (the 512 x 512 matmul),
            # which neither waits for it nor holds it up.
            beside = [o for o in compute if _concurrent(ops, o.id, dp.id)]
            assert beside and sum(o.duration_s for o in beside) > 0
        # The next step does not start before the dp all-reduce of this one is done.
        first_of_1 = next(o for o in ops if o.iteration == 1)
        assert coll[1].id in anc[first_of_1.id]


def test_the_cli_imports_a_real_trace(tmp_path, capsys):
    from dtnet import cli
    out = tmp_path / "t.json"
    assert cli.main(["trace", "import", "kineto", *_files("two-pg", "kineto"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 ranks" in printed and "assumed: process groups inferred" in printed
    assert cli.main(["trace", "show", str(out)]) == 0


# ---- the same runs' execution traces --------------------------------------------------------

from traffic.importers import chakra, pytorch_et  # noqa: E402


@pytest.fixture(scope="module")
def ddp_et():
    return pytorch_et.load(_files("ddp", "et"), kineto=_files("ddp", "kineto"))


def test_et_ddp_matches_the_program(ddp_et):
    assert ddp_et.groups == {"pg0": [0, 1, 2, 3]}
    for r in range(RANKS):
        ops = ddp_et.ops[r]
        anc = _closure(ops)
        coll = _collectives(ddp_et, r)
        assert [(o.op, o.size_bytes, o.iteration) for o in coll] == \
            [("all_reduce", DDP_BUCKETS[0], 0), ("all_reduce", DDP_BUCKETS[1], 0),
             ("all_reduce", DDP_BUCKETS[0], 1), ("all_reduce", DDP_BUCKETS[1], 1)]
        for it in (0, 1):
            first, second = [o for o in coll if o.iteration == it]
            compute = [o for o in ops if o.kind == "compute" and o.iteration == it]
            # Layer 1's backward runs beside bucket 0; DDP copies both buckets back (tensor
            # dependencies) before the optimizer step, which the profiler times.
            beside = [o for o in compute if _concurrent(ops, o.id, first.id)]
            assert sum(o.duration_s for o in beside) > 0
            step = next(o for o in compute if o.label.startswith("Optimizer.step"))
            assert {first.id, second.id} <= anc[step.id] and step.duration_s > 0


def test_et_two_groups_with_the_profilers_threads():
    t = pytorch_et.load(_files("two-pg", "et"), kineto=_files("two-pg", "kineto"))
    by_ranks = {tuple(v): k for k, v in t.groups.items()}
    assert set(by_ranks) == {(0, 1), (2, 3), (0, 2), (1, 3)}
    for r in range(RANKS):
        tp, dp = by_ranks[tuple(sorted((r, r ^ 1)))], by_ranks[tuple(sorted((r, r ^ 2)))]
        coll = _collectives(t, r)
        assert [(o.group, o.size_bytes) for o in coll] == [(tp, TP_BYTES), (dp, DP_BYTES)] * 2
        ops, anc = t.ops[r], _closure(t.ops[r])
        for it in (0, 1):
            dp_op = [o for o in coll if o.iteration == it][1]
            mm = next(o for o in ops if o.iteration == it and o.label == "aten::matmul" and o.duration_s > 0
                      and _concurrent(ops, o.id, dp_op.id))
            update = next(o for o in ops if o.iteration == it and o.label == "aten::mul")
            assert dp_op.id in anc[update.id] and mm.id not in anc[dp_op.id]  # g feeds the update


def test_et_without_profiler_traces_says_what_it_lacks():
    t = pytorch_et.load(_files("ddp", "et"))
    assert "compute is 0 s" in t.meta["assumed"]
    assert all(o.duration_s == 0 for ops in t.ops.values() for o in ops)
    assert [o.size_bytes for o in _collectives(t, 0)] == DDP_BUCKETS * 2
    # Two groups per rank and no worker threads to tell them apart: refuse, do not guess.
    from badinput import InputError
    with pytest.raises(InputError, match="process groups: expected collectives whose process group the trace "
                                         "tells .*pass --kineto"):
        pytorch_et.load(_files("two-pg", "et"))


def test_chakra_import_reads_pytorch_execution_traces():
    t = chakra.load(_files("ddp", "et"))
    assert t.meta["format"] == "pytorch-et" and len(_collectives(t, 3)) == 4
