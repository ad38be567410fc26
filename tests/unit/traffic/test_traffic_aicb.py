"""SimAI/AICB text workload importer, with fixtures written here."""
import pytest

from badinput import InputError
from traffic.importers import aicb

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 8 ga: 2 all_gpus: 8 "
          "checkpoints: 0 checkpoint_initiates: 0")
ROWS = [
    "embedding_layer -1 556000 ALLREDUCE 16777216 1000 NONE 0 2000 ALLREDUCE 33554432 100",
    "attention_layer -1 300000 ALLREDUCE 8388608 600000 ALLREDUCE 8388608 500000 NONE 0 100",
    "mlp_layer -1 400000 NONE 0 800000 ALLGATHER 4096 700000 REDUCESCATTER_DP_EP 65536 100",
]


def _write(tmp_path, header=HEADER, rows=ROWS, count=None):
    p = tmp_path / "workload.txt"
    p.write_text("\n".join([header, str(len(rows) if count is None else count), *rows]) + "\n")
    return str(p)


def test_groups_and_streams(tmp_path):
    t = aicb.load([_write(tmp_path)])
    assert t.nranks == 8 and t.meta["dp"] == 4 and len(t.classes) == 1  # pp 1: every rank runs one stream
    assert t.groups["tp-p0-d0"] == [0, 1] and t.groups["dp-p0-t0"] == [0, 2, 4, 6]
    ops = t.ops[0]
    fp = [o for o in ops if o.label.startswith("fp")]
    # The rows are the iteration, as SimAI replays them: ga does not repeat them (AICB writes the
    # micro-batches out); the header's vpp does nothing without a pipeline.
    assert [o.kind for o in fp] == ["compute", "collective", "compute", "collective", "compute"]
    assert fp[0].duration_s == pytest.approx(556e-6)  # ns in the file
    assert fp[1].group == "tp-p0-d0" and fp[1].size_bytes == 16777216
    wg = [o for o in ops if o.kind == "collective" and o.label.startswith("wg")]
    # Backward runs the rows in reverse; _DP_EP is the data-parallel group of one expert shard.
    assert [(o.op, o.group, o.size_bytes) for o in wg] == [("reduce_scatter", "edp-p0-t0-x0", 65536),
                                                          ("all_reduce", "dp-p0-t0", 33554432)]
    assert wg[1].deps[-1] == wg[0].id  # gradients sync in order, off the compute stream
    assert ops[-1].label == "wg update" and ops[-1].duration_s == pytest.approx(300e-9)
    assert set(ops[-1].deps) >= {wg[-1].id}


# A stage's iteration as AICB writes it: a row before the micro-batches, ga blocks of
# [embedding, 2 layers of 2 rows, output layer], a row after.
BLOCK = ["embedding_layer -1 1000 ALLREDUCE 4096 1000 NONE 0 1000 NONE 0 10",
         "attention_row -1 2000 ALLREDUCE 8192 2000 ALLREDUCE 8192 2000 NONE 0 10",
         "mlp_row -1 3000 ALLREDUCE 8192 3000 ALLREDUCE 8192 3000 NONE 0 10",
         "attention_row -1 2000 ALLREDUCE 8192 2000 ALLREDUCE 8192 2000 NONE 0 10",
         "mlp_row -1 3000 ALLREDUCE 8192 3000 ALLREDUCE 8192 3000 NONE 0 10",
         "final_column -1 500 ALLGATHER 4096 500 REDUCESCATTER 4096 500 NONE 0 10"]
GRAD = "grad_norm -1 1 NONE 0 1 NONE 0 1 REDUCESCATTER 1048576 1"
OPT = "optimizer1 -1 0 ALLREDUCE 4 0 NONE 0 0 NONE 0 1"


def _pipe(tmp_path, pp=2, vpp=1, ga=2, blocks=None):
    header = HEADER.replace("pp: 1", f"pp: {pp}").replace("vpp: 8", f"vpp: {vpp}").replace("ga: 2", f"ga: {ga}") \
        .replace("all_gpus: 8", f"all_gpus: {4 * pp}") + " pp_comm: 4096"
    rows = [GRAD] + BLOCK * (ga if blocks is None else blocks) + [OPT]
    return _write(tmp_path, header=header, rows=rows)


def _p2p(ops, kind):
    return [o for o in ops if o.kind == kind]


def test_pipeline_stages_pass_pp_comm_per_micro_batch(tmp_path):
    t = aicb.load([_pipe(tmp_path)])
    assert t.meta["pp"] == 2 and t.meta["dp"] == 2 and t.meta["schedule"] == "gpipe"
    assert t.meta["rows_per_microbatch"] == 6 and t.meta["rows_before_microbatches"] == 1
    assert [c.name for c in t.classes] == ["stage0", "stage1"]
    first, last = t.ops[0], t.ops[4]  # ranks 0 and 4: t 0, d 0 of stages 0 and 1
    assert [(o.peer, o.size_bytes) for o in _p2p(first, "send")] == [(4, 4096)] * 2  # activations of 2 mbs
    assert [o.peer for o in _p2p(last, "send")] == [0, 0]  # and their gradients back
    assert len(_p2p(first, "recv")) == len(_p2p(last, "recv")) == 2
    # Stage 1 waits for micro-batch 0's activations before its embedding row; backward runs the
    # last micro-batch first, as SimAI's reverse pass over the rows does.
    i = next(k for k, o in enumerate(last) if o.kind == "recv")
    assert last[i + 1].label == "fp embedding_layer" and last[i + 1].deps == (last[i].id,)
    grads = [o.id for o in _p2p(first, "recv")]
    assert grads == ["g/m1/c0/1>0", "g/m0/c0/1>0"]


def test_vpp_interleaves_chunks_and_wraps_from_the_last_stage(tmp_path):
    t = aicb.load([_pipe(tmp_path, vpp=2)])  # the 2 layers of a block are the 2 chunks
    assert t.meta["schedule"] == "interleaved"
    first, last = t.ops[0], t.ops[4]
    # A first or last stage sends 2 x vpp x ga - ga messages (chunk 0 enters stage 0 and the last
    # chunk leaves the last stage without one); SimAI's analytical model counts 2 x vpp x ga.
    assert len(_p2p(first, "send")) == len(_p2p(last, "send")) == 2 * 2 * 2 - 2
    wrap = [o for o in _p2p(first, "recv") if o.id.startswith("a/")]
    assert [o.id for o in wrap] == ["a/m0/c0/1>0", "a/m1/c0/1>0"] and {o.peer for o in wrap} == {4}
    # Megatron's order: chunk 0 of micro-batches 0 and 1, then chunk 1 of both.
    fwd = [o.label for o in first if o.kind != "collective" and o.label.startswith(("fp embedding", "fp final",
                                                                                    "pp recv act"))]
    assert fwd == ["fp embedding_layer", "fp embedding_layer", "pp recv act mb0 chunk0", "fp final_column",
                   "pp recv act mb1 chunk0", "fp final_column"]


def test_the_9216_gpu_simai_example_imports_compact():
    import pathlib
    path = pathlib.Path(__file__).parents[2] / "data" / "aicb" / "simai-workload_analytical.txt"
    t = aicb.load([str(path)])
    assert t.nranks == 9216 and len(t.classes) == 12 and t.meta["rows_per_microbatch"] == 74
    assert (t.layout.tp, t.layout.dp, t.layout.pp, t.layout.ep) == (2, 384, 12, 16)
    middle, first = t.classes[5].ops, t.classes[0].ops
    assert len(_p2p(middle, "send")) == len(_p2p(middle, "recv")) == 2 * 8 * 24
    assert len(_p2p(first, "send")) == len(_p2p(first, "recv")) == 2 * 8 * 24 - 24
    assert {o.group for o in middle if o.kind == "collective"} == {"tp", "dp", "ep", "edp"}
    assert {o.group for o in t.ops_of(9215) if o.kind == "collective"} == {"tp-p11-d383", "dp-p11-t1", "ep-p11-t1-g23",
                                                                         "edp-p11-t1-x15"}


def test_tp_one_drops_tp_collectives(tmp_path):
    header = HEADER.replace("model_parallel_NPU_group: 2", "model_parallel_NPU_group: 1")
    t = aicb.load([_write(tmp_path, header=header)])
    assert not any(o.group and o.group.startswith("tp") for o in t.ops[0])


@pytest.mark.parametrize("kw,msg", [
    (dict(vpp=2, ga=3), "line 1: vpp:: expected ga (3) a multiple of pp (2) for an interleaved pipeline"),
    (dict(vpp=3), "line 1: vpp:: expected 3 repetitions of the layer rows in each micro-batch block of 6 rows"),
    (dict(vpp=0), "line 1: vpp:: expected an integer >= 1, found 0"),
    (dict(ga=3, blocks=2), "line 1: ga:: expected rows that hold ga=3 micro-batch blocks one after another"),
])
def test_a_pipeline_the_rows_do_not_show_is_refused(tmp_path, kw, msg):
    p = _pipe(tmp_path, **kw)
    with pytest.raises(InputError) as e:
        aicb.load([p])
    assert str(e.value).startswith(f"{p}: {msg}"), str(e.value)


@pytest.mark.parametrize("header,rows,count,msg", [
    ("NOT_A_POLICY all_gpus: 8", ROWS, None, "line 1: expected a parallelism keyword"),
    (HEADER.replace("all_gpus: 8", "all_gpus: 7"), ROWS, None, "line 1: all_gpus:: expected a multiple"),
    (HEADER.replace(" all_gpus: 8", ""), ROWS, None, "line 1: all_gpus:: expected the GPU count"),
    (HEADER.replace("ep: 1", "ep: 3"), ROWS, None, "line 1: ep:: expected a divisor of dp = 4"),
    (HEADER.replace("pp: 1", "pp: 2"), ROWS, None, "line 1: pp_comm:: expected the bytes"),
    (HEADER.replace("all_gpus: 8", "all_gpus: 4000000"), ROWS, None, "line 1: all_gpus:: expected at most 1048576"),
    (HEADER + " pp_comm: 99999999999999999999", ROWS, None, "line 1: pp_comm:: expected at most 9223372036854775807"),
    (HEADER + " colour: 3", ROWS, None, "line 1: colour:: expected one of"),
    (HEADER.replace("ga: 2", "ga: x"), ROWS, None, "line 1: ga:: expected an integer after it"),
    (HEADER, ROWS, 5, "line 2: expected the number of rows that follow (3), found 5"),
    (HEADER, ROWS[:1] + ["short row 1 2"], None, "line 4: expected 12 columns, found 4 columns"),
    (HEADER, [ROWS[0].replace("556000", "5x6")], None, "line 3: expected integers"),
    (HEADER, [ROWS[0].replace("556000", "-1")], None, "line 3: expected times and sizes >= 0"),
    (HEADER, [ROWS[0].replace("ALLREDUCE 16777216", "ALLREDUCEALLTOALL 16")], None, "line 3: expected a comm type"),
])
def test_corrupt_workloads(tmp_path, header, rows, count, msg):
    p = _write(tmp_path, header, rows, count)
    with pytest.raises(InputError) as e:
        aicb.load([p])
    assert str(e.value).startswith(f"{p}: {msg}"), str(e.value)


def test_binary_and_empty_files(tmp_path):
    b = tmp_path / "b.txt"
    b.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="expected a text file"):
        aicb.load([str(b)])
    e = tmp_path / "e.txt"
    e.write_text("")
    with pytest.raises(InputError, match="an empty file"):
        aicb.load([str(e)])
    with pytest.raises(InputError, match="expected one AICB workload file"):
        aicb.load([str(e), str(e)])
