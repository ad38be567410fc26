"""The alpha-beta model against the textbook closed forms."""
import math

import pytest

from badinput import InputError
from traffic.collectives import build_schedule, busbw_factor, predict_time_s

GBPS, ALPHA = 100.0, 5e-6
B = GBPS * 1e9 / 8


@pytest.mark.parametrize("n", [2, 3, 8, 13, 32])
def test_ring_all_reduce_closed_form(n):
    size = 1000 * n
    s = build_schedule("all_reduce", "ring", n, size)
    assert predict_time_s(s, GBPS, ALPHA) == pytest.approx(2 * (n - 1) * (ALPHA + size / n / B))


@pytest.mark.parametrize("n", [2, 4, 16])
def test_halving_doubling_closed_form(n):
    size = 1024 * n
    s = build_schedule("all_reduce", "halving-doubling", n, size)
    assert predict_time_s(s, GBPS, ALPHA) == pytest.approx(2 * math.log2(n) * ALPHA + 2 * (n - 1) / n * size / B)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_gather_scatter_closed_form(op):
    n, size = 8, 8000
    s = build_schedule(op, "ring", n, size)
    assert predict_time_s(s, GBPS, ALPHA) == pytest.approx((n - 1) * (ALPHA + size / n / B))


def test_latency_bound_and_bandwidth_bound_regimes():
    n = 32
    small = {alg: predict_time_s(build_schedule("all_reduce", alg, n, 1024), GBPS, ALPHA)
             for alg in ("ring", "halving-doubling", "tree")}
    assert small["halving-doubling"] < small["ring"] and small["tree"] < small["ring"]
    big = {alg: predict_time_s(build_schedule("all_reduce", alg, n, 1 << 28), GBPS, ALPHA)
           for alg in ("ring", "halving-doubling")}
    assert big["ring"] == pytest.approx(big["halving-doubling"], rel=0.01)


def test_pipelining_helps_a_chain_broadcast():
    n, size = 8, 1 << 24
    s = build_schedule("broadcast", "ring", n, size)
    lock = predict_time_s(s, GBPS, ALPHA)
    piped = predict_time_s(s, GBPS, ALPHA, pipeline_slice_bytes=1 << 16)
    assert lock == pytest.approx((n - 1) * (ALPHA + size / B))
    assert piped == pytest.approx(size / B + (n - 1) * (ALPHA + (1 << 16) / B))


def test_intra_server_links_are_faster():
    s = build_schedule("all_reduce", "hierarchical", 16, 1 << 24, gpus_per_server=8)
    flat = predict_time_s(s, GBPS, ALPHA)
    nvlink = predict_time_s(s, GBPS, ALPHA, intra_gbps=2400.0, gpus_per_server=8)
    assert nvlink < flat / 3


def test_busbw_factors():
    assert busbw_factor("all_reduce", 4) == 1.5
    assert busbw_factor("all_gather", 4) == 0.75 and busbw_factor("broadcast", 4) == 1.0


@pytest.mark.parametrize("kw", [dict(link_gbps=0, latency_s=0), dict(link_gbps=1, latency_s=-1),
                                dict(link_gbps=1, latency_s=0, intra_gbps=5)])
def test_bad_model_arguments(kw):
    with pytest.raises(InputError):
        predict_time_s(build_schedule("all_reduce", "ring", 4, 100), **kw)


def test_server_of_places_ranks_that_are_not_in_blocks():
    # A rail-aligned "snake" (servers 0 1 1 0 in rank order) with the ring crossing servers twice:
    # the crossing hops run at the NIC rate, the rest over NVLink.
    s = build_schedule("all_reduce", "ring", 4, 4000)
    blocks = predict_time_s(build_schedule("all_reduce", "ring", 4, 4000), GBPS, ALPHA,
                            intra_gbps=2400.0, gpus_per_server=2)
    snake = predict_time_s(s, GBPS, ALPHA, intra_gbps=2400.0, server_of=[0, 0, 1, 1])
    assert snake == pytest.approx(blocks)
    # Every hop inside one server: the whole ring at the intra rate.
    one = predict_time_s(s, GBPS, ALPHA, intra_gbps=2400.0, server_of=[7, 7, 7, 7])
    assert one == pytest.approx(predict_time_s(s, 2400.0, ALPHA))


@pytest.mark.parametrize("kw", [dict(intra_gbps=5, server_of=[0, 0, 1]),
                                dict(intra_gbps=5, server_of=[0, 0, 1, 1], gpus_per_server=2),
                                dict(server_of=[0, 0, 1, 1]),
                                dict(intra_gbps=0, server_of=[0, 0, 1, 1])])
def test_bad_server_placements(kw):
    with pytest.raises(InputError):
        predict_time_s(build_schedule("all_reduce", "ring", 4, 100), GBPS, ALPHA, **kw)
