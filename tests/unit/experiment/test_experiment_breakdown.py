"""The iteration time split: compute, exposed communication, idle (pipeline bubble)."""
import random

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


def _loop_breakdown(ev, iterations, dilation):
    """The split as a plain loop over sorted spans computes it, term by term (the reference)."""
    def union(spans):
        out = []
        for a, b in sorted(s for s in spans if s[1] > s[0]):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out

    def overlap(x, y):
        i = j = 0
        total = 0.0
        while i < len(x) and j < len(y):
            total += max(0.0, min(x[i][1], y[j][1]) - max(x[i][0], y[j][0]))
            i, j = (i + 1, j) if x[i][1] < y[j][1] else (i, j + 1)
        return total

    t0, t1 = min(e["start"] for e in ev), max(e["end"] for e in ev)
    sends = {(e["rank"], e["op_id"]): e["start"] for e in ev if e["kind"] == "send"}
    per_rank = {}
    for e in ev:
        spans = per_rank.setdefault(e["rank"], ([], []))
        start = e["start"]
        if e["kind"] == "recv":
            start = max(start, sends.get((e["peer"], e["op_id"]), start))
        spans[e["kind"] != "compute"].append((e["start"] if e["kind"] == "compute" else start, e["end"]))
    sums = [0.0, 0.0, 0.0, 0.0]
    for comp, comm in per_rank.values():
        comp, comm = union(comp), union(comm)
        both, lc, lm = overlap(comp, comm), sum(b - a for a, b in comp), sum(b - a for a, b in comm)
        sums = [sums[0] + lc, sums[1] + (lm - both), sums[2] + both, sums[3] + ((t1 - t0) - lc - (lm - both))]
    n = len(per_rank) * iterations * dilation
    return dict(zip(("compute", "exposed_comm", "overlapped_comm", "idle"), (v / n for v in sums)))


def test_the_array_split_is_the_loop_split_to_the_last_bit():
    rng = random.Random(7)
    for _ in range(200):
        events = []
        for _ in range(rng.randint(1, 50)):
            kind = rng.choice(("compute", "collective", "send", "recv"))
            start = rng.choice((rng.random() * 10, round(rng.random() * 10, 1)))  # ties and touching spans too
            end = start + rng.choice((0.0, 0.1, rng.random() * 3))
            events.append(ev(kind, rng.randint(0, 3), start, end, op_id=rng.randint(0, 5), peer=rng.randint(0, 3)))
        assert time_breakdown(events, iterations=2, dilation=3.0) == _loop_breakdown(events, 2, 3.0)
