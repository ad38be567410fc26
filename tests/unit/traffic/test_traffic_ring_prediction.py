"""ring_predict_time_s gives predict_time_s's number for ring collectives without building the schedule."""
import pytest

from badinput import InputError
from traffic.collectives import build_schedule, predict_time_s
from traffic.collectives.model import ring_predict_time_s

CASES = [  # (n, size_bytes, slice_bytes, where)
    (2, 10**6, None, {}), (3, 1001, 64, {}), (8, 2**20 + 5, 16384, {}), (7, 6, None, {}), (5, 3, 1, {}),
    (8, 10**7 + 3, 16384, {"intra_gbps": 900, "gpus_per_server": 4}),
    (12, 123457, 1000, {"intra_gbps": 50, "gpus_per_server": 3}),
    (6, 99991, 777, {"intra_gbps": 3600, "server_of": [0, 1, 0, 1, 2, 2]}),
    (16, 2**24 + 15, 4096, {"intra_gbps": 3600, "server_of": [r % 4 for r in range(16)]}),
]


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n,size,slice_bytes,where", CASES)
@pytest.mark.parametrize("latency_s", [0.0, 3e-6])
def test_the_same_number_as_the_schedule(op, n, size, slice_bytes, where, latency_s):
    sched = build_schedule(op, "ring", n, size)
    want = predict_time_s(sched, 400, latency_s, pipeline_slice_bytes=slice_bytes, **where)
    got = ring_predict_time_s(op, n, size, 400, latency_s, pipeline_slice_bytes=slice_bytes, **where)
    assert got == want


def test_one_rank_costs_nothing_and_bad_arguments_are_refused():
    assert ring_predict_time_s("all_reduce", 1, 10**6, 400, 1e-6) == 0.0
    with pytest.raises(InputError):
        ring_predict_time_s("all_to_all", 4, 10, 400, 0.0)
    with pytest.raises(InputError):
        ring_predict_time_s("all_reduce", 4, 10, 0, 0.0)
    with pytest.raises(InputError):
        ring_predict_time_s("all_reduce", 4, 10, 400, 0.0, intra_gbps=900)
