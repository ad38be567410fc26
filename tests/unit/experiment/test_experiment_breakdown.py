"""The iteration time split: compute, exposed communication, idle (pipeline bubble)."""
import pytest

from experiment.outputs.summary import job_results, time_breakdown


def ev(kind, rank, start, end, **kw):
    return {"kind": kind, "job": "j", "rank": rank, "start": start, "end": end, "iteration": 0,
            "op_id": kw.pop("op_id", f"{kind}{rank}{start}"), **kw}


def test_parts_sum_to_the_iteration_time():
    events = [ev("compute", 0, 0.0, 4.0), ev("collective", 0, 4.0, 6.0, op="all_reduce", op_id="ar", algorithm="ring", size_bytes=8),
              ev("compute", 1, 0.0, 3.0), ev("collective", 1, 3.0, 6.0, op="all_reduce", op_id="ar", algorithm="ring", size_bytes=8)]
    j = job_results("j", events, dilation=1.0)
    b = j["breakdown_s"]
    assert b["compute"] == pytest.approx(3.5)
    assert b["exposed_comm"] == pytest.approx(2.5)
    assert b["idle"] == pytest.approx(0.0)
    assert b["compute"] + b["exposed_comm"] + b["idle"] == pytest.approx(j["iteration_time_s"]["mean"])


def test_comm_under_compute_is_not_exposed():
    events = [ev("compute", 0, 0.0, 4.0), ev("collective", 0, 1.0, 5.0, op="all_reduce")]
    b = time_breakdown(events, iterations=1, dilation=1.0)
    assert b["exposed_comm"] == pytest.approx(1.0)
    assert b["overlapped_comm"] == pytest.approx(3.0)


def test_waiting_for_the_upstream_stage_is_bubble_not_comm():
    # Stage 0 computes 0-2 then sends; stage 1 posts its recv at 0 and gets the data 2-3.
    events = [ev("compute", 0, 0.0, 2.0), ev("send", 0, 2.0, 3.0, op_id="act0>1", peer=1),
              ev("recv", 1, 0.0, 3.0, op_id="act0>1", peer=0), ev("compute", 1, 3.0, 5.0)]
    b = time_breakdown(events, iterations=1, dilation=1.0)
    # per rank: r0 compute 2, comm 1, idle 2; r1 compute 2, comm 1 (2-3), idle 2 (0-2)
    assert b["compute"] == pytest.approx(2.0)
    assert b["exposed_comm"] == pytest.approx(1.0)
    assert b["idle"] == pytest.approx(2.0)


def test_scaled_to_real_time_and_per_iteration():
    events = [ev("compute", 0, 0.0, 40.0), ev("collective", 0, 40.0, 80.0, op="all_reduce")]
    b = time_breakdown(events, iterations=2, dilation=40.0)
    assert b["compute"] == pytest.approx(0.5) and b["exposed_comm"] == pytest.approx(0.5)


def test_no_ops_gives_zeros():
    assert time_breakdown([], iterations=0, dilation=1.0)["compute"] == 0.0
