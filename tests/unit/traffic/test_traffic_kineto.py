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


# ---- streams, record_param_comms, no collectives --------------------------------------------

def _k(ts, dur, stream, corr, name="sm90_gemm", **args):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream,
            "args": {"stream": stream, "correlation": corr, **args}}


def _launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2, "pid": 1, "tid": 1,
            "args": {"correlation": corr}}


def _stream_rank():
    """Backward on stream 7 (six 100 us kernels), the bucket's all-reduce on stream 20 from 250
    to 650 us while kernels 3..6 go on, then the optimizer kernel, launched long before, at 700."""
    ev = [_launch(5 + i, 100 + i) for i in range(8)]
    ev += [_k(100 * i, 100, 7, 100 + i) for i in range(6)]       # 0..600
    ev += [_k(250, 400, 20, 106, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
              **{"Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                 "dtype": "BFloat16", "Process Group Ranks": "[0, 1]", "Process Group Name": "0"})]
    ev += [_k(700, 50, 7, 107)]
    return ev


def _reaches(ops, src, dst):
    by_id = {o.id: o for o in ops}
    todo, seen = [dst], set()
    while todo:
        o = todo.pop()
        if o == src:
            return True
        if o not in seen:
            seen.add(o)
            todo.extend(by_id[o].deps)
    return False


def test_streams_are_concurrent_and_the_recorded_order_is_kept(tmp_path):
    t = kineto.load(_write(tmp_path, [_stream_rank(), _stream_rank()]))
    ops = t.ops[0]
    ar = next(o for o in ops if o.kind == "collective")
    comp = [o for o in ops if o.kind == "compute"]
    # The all-reduce waited for the kernels that had ended when it started (0..200 us)...
    before = [o for o in comp if _reaches(ops, o.id, ar.id)]
    assert sum(o.duration_s for o in before) == pytest.approx(200e-6)
    # ...overlaps the backward kernels that ran beside it (200..600 us)...
    beside = [o for o in comp if not _reaches(ops, o.id, ar.id) and not _reaches(ops, ar.id, o.id)]
    assert sum(o.duration_s for o in beside) == pytest.approx(400e-6)
    # ...and the optimizer kernel, idle on its stream until the all-reduce ended, waits for it.
    last = comp[-1]
    assert last.duration_s == pytest.approx(50e-6) and ar.id in last.deps
    assert t.meta["lanes"] == "cuda streams"


def test_nccl_kernel_details_from_record_param_comms(tmp_path):
    def rank_events():
        rpc = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 40, "dur": 30, "pid": 1, "tid": 1,
               "args": {"Collective name": "_allgather_base", "dtype": "Float", "In msg nelems": 64,
                        "Out msg nelems": 256, "Group size": 4, "Process Group Name": "3",
                        "Process Group Ranks": "[0, 1, 2, 3]"}}
        return [_k(0, 10, 7, 1), _launch(1, 1), rpc, _launch(50, 2),
                _k(60, 20, 20, 2, name="ncclDevKernel_AllGather_RING_LL")]
    t = kineto.load(_write(tmp_path, [rank_events() for _ in range(4)]))
    coll = [o for o in t.ops[2] if o.kind == "collective"]
    assert [(o.op, o.size_bytes, o.group) for o in coll] == [("all_gather", 1024, "pg3")]
    assert t.groups["pg3"] == [0, 1, 2, 3]


def test_a_bare_nccl_kernel_is_an_error(tmp_path):
    ev = [_k(0, 10, 7, 1), _k(20, 10, 20, 2, name="ncclDevKernel_AllReduce_Sum_f32")]
    with pytest.raises(InputError, match=r"traceEvents\[1\]: expected an NCCL kernel with its collective in args"):
        kineto.load(_write(tmp_path, [ev]))


def test_a_trace_without_collectives_is_an_error(tmp_path):
    ev = [_k(0, 10, 7, 1), _k(20, 10, 7, 2), {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]
    with pytest.raises(InputError, match="traceEvents: expected at least one collective"):
        kineto.load(_write(tmp_path, [ev, ev]))


def test_gpu_step_waits_for_the_last_steps_collectives(tmp_path):
    """The all-reduce ends during the last backward kernel, so the next step's first kernel shows
    no wait; the step boundary (ProfilerStep, by launch time) still orders them."""
    def rank_events():
        step = lambda n, ts, dur: {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",  # noqa: E731
                                   "ts": ts, "dur": dur, "pid": 1, "tid": 1}
        ar = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
              "Process Group Ranks": "[0, 1]", "Process Group Name": "0"}
        return [step(0, 0, 100), step(1, 100, 100), _launch(1, 1), _launch(2, 2), _launch(3, 3), _launch(101, 4),
                _k(10, 100, 7, 1), _k(20, 50, 20, 2, name="ncclDevKernel_AllReduce", **ar),
                _k(110, 90, 7, 3), _k(200, 10, 7, 4)]
    t = kineto.load(_write(tmp_path, [rank_events(), rank_events()]))
    ops = t.ops[0]
    ar = next(o for o in ops if o.kind == "collective")
    first_of_1 = next(o for o in ops if o.iteration == 1)
    assert ar.iteration == 0 and ar.id in first_of_1.deps


def test_record_param_comms_without_details_is_named(tmp_path):
    rpc = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
           "args": {"Input Dims": [[1024], []], "Input type": ["float", "Scalar"]}}
    ev = [rpc, _launch(2, 1), _k(20, 10, 20, 1, name="ncclKernel_AllReduce_RING_LL_Sum_float")]
    with pytest.raises(InputError, match=r"traceEvents\[0\].args: expected record_param_comms with Collective name"):
        kineto.load(_write(tmp_path, [ev]))


def test_a_recorded_stream_wait_orders_two_streams(tmp_path):
    """Stream 9 waits (cudaStreamWaitEvent) on an event recorded on stream 7 after kernel 2:
    stream 9's next kernel depends on kernel 2, though it starts long after (no timing hint)."""
    def rank_events():
        ar = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
              "Process Group Ranks": "[0, 1]", "Process Group Name": "0"}
        wait = {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 9, "ts": 5, "dur": 1,
                "args": {"stream": 9, "wait_on_stream": 7, "correlation": 13, "wait_on_cuda_event_record_corr_id": 12}}
        return [_launch(1, 10), _launch(2, 11), _launch(3, 12), _launch(4, 13), _launch(5, 14), _launch(6, 15), wait,
                _k(0, 100, 7, 10), _k(100, 100, 7, 11), _k(200, 100, 7, 15),
                _k(1000, 10, 9, 14), _k(1100, 20, 20, 16, name="ncclDevKernel_AllReduce", **ar)]
    t = kineto.load(_write(tmp_path, [rank_events(), rank_events()]))
    ops = t.ops[0]
    side = next(o for o in ops if o.kind == "compute" and o.duration_s == pytest.approx(10e-6))
    k2 = [o for o in ops if o.kind == "compute" and o is not side and _reaches(ops, o.id, side.id)]
    assert sum(o.duration_s for o in k2) == pytest.approx(200e-6)  # kernels 1 and 2, not kernel 3
