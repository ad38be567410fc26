"""Kineto (PyTorch profiler) importer, with fixtures written here."""
import json

import pytest

from badinput import InputError
from traffic.importers import kineto


def _kernel(ts, dur, name="ampere_sgemm", **args):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": args}


def _nccl(ts, dur, coll, nelems, ranks, dtype="BFloat16", out=None, pg="0", **extra):
    args = {"Collective name": coll, "In msg nelems": nelems, "Out msg nelems": out if out is not None else nelems,
            "Group size": len(ranks), "dtype": dtype, "Process Group Ranks": str(ranks), "Process Group Name": pg}
    args.update(extra)
    return _kernel(ts, dur, name=f"ncclDevKernel_{coll}", **args)


def _rank_events(rank):
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5},
        _kernel(10, 100), _kernel(50, 100),  # overlap: 140 us of busy time
        _nccl(200, 30, "allreduce", 1024, [0, 1]),
        _kernel(240, 10),
        _nccl(260, 5, "_allgather_base", 64, [0, 1], out=128, dtype="Float"),
        _nccl(270, 5, "send" if rank == 0 else "recv", 256, [0, 1], dtype="Float",
              **({"Dst Rank": 1} if rank == 0 else {"Src Rank": 0})),
    ]


def _write(tmp_path, events_by_rank, rank_info=True):
    paths = []
    for r, events in enumerate(events_by_rank):
        p = tmp_path / f"rank{r}.json"
        d = {"traceEvents": events}
        if rank_info:
            d["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": len(events_by_rank)}
        p.write_text(json.dumps(d))
        paths.append(str(p))
    return paths


def test_kineto_import(tmp_path):
    t = kineto.load(_write(tmp_path, [_rank_events(0), _rank_events(1)]))
    ops = t.ops[0]
    assert [o.kind for o in ops] == ["compute", "collective", "compute", "collective", "send"]
    assert ops[0].duration_s == pytest.approx(140e-6)
    assert (ops[1].op, ops[1].size_bytes) == ("all_reduce", 2048)
    assert (ops[3].op, ops[3].size_bytes) == ("all_gather", 512)  # output size, fp32
    assert ops[4].peer == 1 and t.ops[1][4].kind == "recv" and t.ops[1][4].size_bytes == 1024
    assert all(o.deps == (ops[i].id,) for i, o in enumerate(ops[1:]))
    assert t.groups == {"pg0": [0, 1]}


def test_file_order_follows_distributed_info(tmp_path):
    paths = _write(tmp_path, [_rank_events(0), _rank_events(1)])
    t = kineto.load(paths[::-1])
    assert t.ops[0][4].kind == "send" and t.meta["files"] == paths


def test_group_from_rank_start_and_stride(tmp_path):
    ev = lambda: [_kernel(0, 1, name="ncclKernel_AllReduce", **{  # noqa: E731
        "Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8, "dtype": "Float",
        "Global rank start": 0, "Global rank stride": 2, "Group size": 2})]
    t = kineto.load(_write(tmp_path, [ev(), [], ev(), []]))
    assert t.groups == {"g0_2": [0, 2]}


@pytest.mark.parametrize("mutate,msg", [
    (lambda e: e[3]["args"].update({"dtype": "Complex"}), "traceEvents[3].args.dtype: expected a tensor dtype"),
    (lambda e: e[3]["args"].update({"Collective name": "gather"}), "traceEvents[3].args.Collective name"),
    (lambda e: e[3]["args"].pop("In msg nelems"), "traceEvents[3].args.In msg nelems: expected an integer"),
    (lambda e: e[3]["args"].update({"Process Group Ranks": "[0, 1"}), "Process Group Ranks: expected a list"),
    (lambda e: e[3]["args"].update({"Group size": 3}), "args.Group size: expected the 2 ranks listed"),
    (lambda e: e[3]["args"].update({"In msg nelems": 99}), "expected collective 0 of group pg0 to be all_reduce"),
    (lambda e: e.__setitem__(1, _kernel("x", 5)), "traceEvents[1]: expected a kernel with numeric ts"),
    (lambda e: e[6]["args"].pop("Src Rank"), "traceEvents[6].args.Src Rank"),
])
def test_corrupt_kineto(tmp_path, mutate, msg):
    events = _rank_events(1)
    mutate(events)
    paths = _write(tmp_path, [_rank_events(0), events])
    with pytest.raises(InputError) as e:
        kineto.load(paths)
    assert msg in str(e.value) and str(e.value).startswith(paths[1]), str(e.value)


def test_not_a_trace(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{\"traceEvents\": 3}")
    with pytest.raises(InputError, match="traceEvents: expected a list of trace events"):
        kineto.load([str(p)])
    p.write_text("{oops")
    with pytest.raises(InputError, match="expected JSON"):
        kineto.load([str(p)])
    a, b = _write(tmp_path, [[], []])
    d = json.loads(open(b).read())
    d["distributedInfo"]["rank"] = 0
    open(b, "w").write(json.dumps(d))
    with pytest.raises(InputError, match="distributedInfo.rank: expected each of ranks 0..1 once"):
        kineto.load([a, b])


def test_algorithm_is_recorded(tmp_path):
    paths = _write(tmp_path, [_rank_events(0), _rank_events(1)])
    assert {o.algorithm for o in kineto.load(paths).ops[0] if o.kind == "collective"} == {"ring"}
    assert {o.algorithm for o in kineto.load(paths, algorithm="tree").ops[0] if o.kind == "collective"} == {"tree"}
    with pytest.raises(InputError, match="algorithm: expected one of ring"):
        kineto.load(paths, algorithm="magic")
