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
    assert t.nranks == 8 and t.meta["dp"] == 4
    assert t.groups["tp-0_1"] == [0, 1] and t.groups["dp-0_2_4_6"] == [0, 2, 4, 6]
    ops = t.ops[0]
    fp = [o for o in ops if o.label.startswith("fp")]
    assert [o.kind for o in fp] == ["compute", "collective", "compute", "collective", "compute"] * 2  # ga = 2
    assert fp[0].duration_s == pytest.approx(556e-6)  # ns in the file
    assert fp[1].group == "tp-0_1" and fp[1].size_bytes == 16777216
    wg = [o for o in ops if o.kind == "collective" and o.label.startswith("wg")]
    assert [(o.op, o.group, o.size_bytes) for o in wg] == [("reduce_scatter", "dp-0_2_4_6", 65536),
                                                          ("all_reduce", "dp-0_2_4_6", 33554432)]
    assert ops[-1].label == "wg update" and ops[-1].duration_s == pytest.approx(300e-9)
    assert set(ops[-1].deps) >= {wg[-1].id}


def test_pipeline_stages_pass_pp_comm(tmp_path):
    header = HEADER.replace("pp: 1", "pp: 2") + " pp_comm: 4096"
    t = aicb.load([_write(tmp_path, header=header)])
    assert t.meta["pp"] == 2 and t.meta["dp"] == 2
    sends0 = [o for o in t.ops[0] if o.kind == "send"]
    assert len(sends0) == 2 and {o.peer for o in sends0} == {4} and {o.size_bytes for o in sends0} == {4096}
    assert sum(o.kind == "recv" for o in t.ops[4]) == 2


def test_tp_one_drops_tp_collectives(tmp_path):
    header = HEADER.replace("model_parallel_NPU_group: 2", "model_parallel_NPU_group: 1")
    t = aicb.load([_write(tmp_path, header=header)])
    assert not any(o.group and o.group.startswith("tp") for o in t.ops[0])


@pytest.mark.parametrize("header,rows,count,msg", [
    ("NOT_A_POLICY all_gpus: 8", ROWS, None, "line 1: expected a parallelism keyword"),
    (HEADER.replace("all_gpus: 8", "all_gpus: 7"), ROWS, None, "line 1: all_gpus:: expected a multiple"),
    (HEADER.replace(" all_gpus: 8", ""), ROWS, None, "line 1: all_gpus:: expected the GPU count"),
    (HEADER.replace("ep: 1", "ep: 3"), ROWS, None, "line 1: ep:: expected a divisor of dp = 4"),
    (HEADER.replace("pp: 1", "pp: 2"), ROWS, None, "line 1: pp_comm:: expected the bytes"),
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
