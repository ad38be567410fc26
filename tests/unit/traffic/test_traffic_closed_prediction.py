"""collective_predict_time_s gives predict_time_s's number on the built schedule, for every op and
algorithm, with servers, slices and uneven chunks: closed forms where they exist, the schedule
elsewhere."""
import pytest

from traffic.collectives import ALGORITHMS, OPS, build_schedule, predict_time_s
from traffic.collectives import model
from traffic.collectives.model import collective_predict_time_s, has_closed_form

CASES = [  # (n, size_bytes, slice_bytes, hierarchical's gpus per server, where)
    (1, 10**6, 16384, 1, {}), (2, 10**6, None, 1, {}), (3, 1001, 64, 1, {}), (4, 0, 16384, 2, {}),
    (8, 2**20 + 5, 16384, 4, {}), (7, 6, None, 7, {}), (5, 3, 1, 1, {}),
    (8, 10**7 + 3, 16384, 4, {"intra_gbps": 900, "gpus_per_server": 4}),
    (12, 123457, 1000, 3, {"intra_gbps": 50, "gpus_per_server": 3}),
    (12, 123457, None, 4, {"intra_gbps": 3600, "gpus_per_server": 4}),
    (6, 99991, 777, 2, {"intra_gbps": 3600, "server_of": [0, 1, 0, 1, 2, 2]}),
    (16, 2**24 + 15, 4096, 4, {"intra_gbps": 3600, "server_of": [r % 4 for r in range(16)]}),
    (16, 2**24 + 15, 4096, 8, {"intra_gbps": 3600, "server_of": [r // 8 for r in range(16)]}),
    (9, 2**20 + 1, 4096, 3, {"intra_gbps": 3600, "server_of": [0, 0, 0, 1, 1, 1, 5, 6, 7]}),
]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n,size,slice_bytes,g,where", CASES)
@pytest.mark.parametrize("latency_s", [0.0, 3e-6])
def test_the_same_number_as_the_schedule(op, algorithm, n, size, slice_bytes, g, where, latency_s):
    root = n // 2 if op in ("broadcast", "reduce") else 0
    sched = build_schedule(op, algorithm, n, size, root=root, gpus_per_server=g)
    want = predict_time_s(sched, 400, latency_s, pipeline_slice_bytes=slice_bytes, **where)
    got = collective_predict_time_s(op, algorithm, n, size, 400, latency_s, root=root, schedule_gpus_per_server=g,
                                    pipeline_slice_bytes=slice_bytes, **where)
    assert got == pytest.approx(want, rel=1e-9, abs=0)


def test_closed_forms_build_no_schedule(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("a closed form built the schedule")

    monkeypatch.setattr(model, "build_schedule", refuse)
    for op in OPS:
        for algorithm in ALGORITHMS:
            if has_closed_form(op, algorithm):
                collective_predict_time_s(op, algorithm, 4096, 2**28 + 7, 400, 1e-6, schedule_gpus_per_server=8,
                                          pipeline_slice_bytes=16384, intra_gbps=3600, gpus_per_server=8)
    with pytest.raises(AssertionError):
        collective_predict_time_s("all_reduce", "tree", 8, 2**20, 400, 0.0)


def test_bad_arguments_fail_as_the_schedule_does():
    from badinput import InputError

    with pytest.raises(InputError, match="gpus_per_server"):
        collective_predict_time_s("all_reduce", "hierarchical", 12, 100, 400, 0.0, schedule_gpus_per_server=5)
    with pytest.raises(InputError, match="op"):
        collective_predict_time_s("all_to_some", "direct", 4, 100, 400, 0.0)
    with pytest.raises(InputError, match="link_gbps"):
        collective_predict_time_s("all_reduce", "direct", 4, 100, 0, 0.0)
