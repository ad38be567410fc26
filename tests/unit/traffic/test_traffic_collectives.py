"""Collective schedules: proven by the symbolic executor, and checked against the published byte formulas."""
import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

from traffic.collectives import (ALGORITHMS, OPS, ScheduleError, Transfer, build_schedule,
                                 effective_gpus_per_server, split_even, verify)
from badinput import InputError

SIZES = (0, 1, 1000, 1 << 20)


def _cases(n):
    for op in OPS:
        for alg in ALGORITHMS:
            gs = [g for g in (1, 2, 3, 4, 8, n) if n % g == 0] if alg == "hierarchical" else [None]
            for g in sorted(set(gs), key=str):
                roots = (0, n - 1, n // 2) if op in ("broadcast", "reduce") else (0,)
                for root in roots:
                    yield op, alg, g, root


@pytest.mark.parametrize("n", range(2, 34))
def test_every_schedule_computes_its_collective(n):
    for op, alg, g, root in _cases(n):
        for size in (1000, 7):  # 7 < n for many n: some chunks are empty, none may be lost
            verify(build_schedule(op, alg, n, size, root=root, gpus_per_server=g))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("alg", ALGORITHMS)
def test_one_rank_is_empty(op, alg):
    s = build_schedule(op, alg, 1, 1000, gpus_per_server=1)
    assert s.transfers == [] and s.num_steps == 0 and s.bytes_sent(0) == 0


def _broken_variants(s):
    """Schedules that must fail: a transfer dropped, a reduce turned into a copy, steps swapped."""
    t = s.transfers
    yield dataclasses.replace(s, transfers=t[1:])
    reduces = [i for i, x in enumerate(t) if x.reduce]
    if reduces:
        i = reduces[-1]
        yield dataclasses.replace(s, transfers=t[:i] + [dataclasses.replace(t[i], reduce=False)] + t[i + 1:])
    last = s.num_steps - 1
    if last > 0 and s.op != "all_to_all":  # Bruck's hops commute, so its reversal is still right
        yield dataclasses.replace(s, transfers=[dataclasses.replace(x, step=last - x.step) for x in t])


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_executor_rejects_broken_schedules(n):
    for op, alg, g, root in _cases(n):
        s = build_schedule(op, alg, n, 1000, root=root, gpus_per_server=g)
        for bad in _broken_variants(s):
            if sorted(bad.transfers, key=repr) == sorted(s.transfers, key=repr):
                continue  # reversing a symmetric one-step schedule changes nothing
            with pytest.raises(ScheduleError):
                verify(bad)


def test_executor_rejects_double_counting_and_wrong_sizes():
    s = build_schedule("all_reduce", "ring", 4, 400)
    dup = s.transfers[0]
    with pytest.raises(ScheduleError, match="twice"):
        verify(dataclasses.replace(s, transfers=s.transfers + [dataclasses.replace(dup, step=dup.step + 1)]))
    with pytest.raises(ScheduleError, match="bytes"):
        verify(dataclasses.replace(s, transfers=[dataclasses.replace(dup, size_bytes=1)] + s.transfers[1:]))


@pytest.mark.parametrize("n", range(2, 34))
def test_ring_bytes_match_published_formulas(n):
    size = 1024 * n * 3  # divisible: the formulas hold exactly
    ar = build_schedule("all_reduce", "ring", n, size)
    rs = build_schedule("reduce_scatter", "ring", n, size)
    ag = build_schedule("all_gather", "ring", n, size)
    for r in range(n):
        assert ar.bytes_sent(r) == ar.bytes_received(r) == 2 * (n - 1) * size // n
        assert rs.bytes_sent(r) == ag.bytes_sent(r) == (n - 1) * size // n
    assert ar.num_steps == 2 * (n - 1)
    assert rs.num_steps == ag.num_steps == n - 1


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 33), size=st.integers(0, 10**7))
def test_uneven_sizes_keep_every_byte(n, size):
    ar = build_schedule("all_reduce", "ring", n, size)
    assert sum(ar.chunk_bytes) == size and max(ar.chunk_bytes) - min(ar.chunk_bytes) <= 1
    assert sum(t.size_bytes for t in ar.transfers) == 2 * (n - 1) * size
    for r in range(n):
        assert abs(ar.bytes_sent(r) - 2 * (n - 1) * size / n) <= 2 * (n - 1)
    a2a = build_schedule("all_to_all", "direct", n, size)
    assert all(a2a.bytes_sent(r) == size - a2a.chunk_bytes[r * n + r] for r in range(n))


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_halving_doubling_power_of_two_is_rabenseifner(n):
    s = build_schedule("all_reduce", "halving-doubling", n, 4096 * n)
    assert s.num_steps == 2 * int(math.log2(n))
    assert all(s.bytes_sent(r) == 2 * (n - 1) * 4096 for r in range(n))


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12, 33])
def test_halving_doubling_non_power_of_two_adds_two_steps(n):
    p = 1 << (n.bit_length() - 1)
    assert build_schedule("all_reduce", "halving-doubling", n, 1000).num_steps == 2 * int(math.log2(p)) + 2
    assert build_schedule("all_to_all", "halving-doubling", n, 1000).num_steps == math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [2, 3, 8, 9, 16, 33])
def test_double_binary_tree_is_logarithmic_and_balanced(n):
    s = build_schedule("all_reduce", "tree", n, 2000)
    assert s.num_steps <= 2 * math.ceil(math.log2(n))
    # A rank is interior (sends its half up and to two children) in one tree and a leaf in the other.
    assert max(s.bytes_sent(r) for r in range(n)) <= 4 * 1000
    if n > 2:  # the two trees differ, so the interior load is spread
        interior_a = {t.src for t in s.transfers if 0 in t.chunks and not t.reduce}
        interior_b = {t.src for t in s.transfers if 1 in t.chunks and not t.reduce}
        assert interior_a != interior_b


@pytest.mark.parametrize("servers,g", [(2, 4), (4, 8), (3, 2), (1, 8), (8, 1)])
def test_hierarchical_is_rail_aware(servers, g):
    n = servers * g
    for op in set(OPS) - {"sendrecv"}:  # sendrecv's peers are the user's choice
        s = build_schedule(op, "hierarchical", n, 64 * n * n, gpus_per_server=g, root=n - 1)
        verify(s)
        for t in s.transfers:
            if t.src // g != t.dst // g:
                assert t.src % g == t.dst % g, f"{op}: inter-server {t.src}->{t.dst} crosses rails"
    ar = build_schedule("all_reduce", "hierarchical", n, 64 * n * n, gpus_per_server=g)
    assert ar.num_steps == 2 * (g - 1) + 2 * (servers - 1)
    size = 64 * n * n
    expect = 2 * (g - 1) * size // g + 2 * (servers - 1) * size // (g * servers)
    assert all(ar.bytes_sent(r) == expect for r in range(n))


def test_direct_and_broadcast_step_counts():
    assert build_schedule("all_reduce", "direct", 9, 900).num_steps == 2
    assert build_schedule("all_to_all", "direct", 9, 900).num_steps == 1
    assert build_schedule("broadcast", "ring", 9, 900).num_steps == 8
    assert build_schedule("reduce", "tree", 8, 900).num_steps == 3


def test_sendrecv_is_a_ring_shift():
    s = build_schedule("sendrecv", "direct", 4, 100)
    assert sorted((t.src, t.dst, t.size_bytes) for t in s.transfers) == [(0, 1, 100), (1, 2, 100), (2, 3, 100),
                                                                      (3, 0, 100)]


def test_schedule_accessors_are_in_step_order():
    s = build_schedule("all_reduce", "ring", 5, 500)
    steps = [t.step for t in s.sends(2)]
    assert steps == sorted(steps) == list(range(8))
    assert all(t.dst == 2 for t in s.recvs(2)) and all(isinstance(t, Transfer) for t in s.recvs(2))


@pytest.mark.parametrize("kwargs,key", [
    (dict(op="gather", algorithm="ring", nranks=4, size_bytes=1), "op"),
    (dict(op="all_reduce", algorithm="bogus", nranks=4, size_bytes=1), "algorithm"),
    (dict(op="all_reduce", algorithm="ring", nranks=0, size_bytes=1), "nranks"),
    (dict(op="all_reduce", algorithm="ring", nranks=4, size_bytes=-1), "size_bytes"),
    (dict(op="broadcast", algorithm="ring", nranks=4, size_bytes=1, root=4), "root"),
    (dict(op="all_reduce", algorithm="hierarchical", nranks=6, size_bytes=1, gpus_per_server=4), "gpus_per_server"),
    (dict(op="all_reduce", algorithm="hierarchical", nranks=6, size_bytes=1), "gpus_per_server"),
])
def test_bad_arguments_are_input_errors(kwargs, key):
    with pytest.raises(InputError) as e:
        build_schedule(**kwargs)
    assert str(e.value).startswith(f"{key}: expected")


def test_split_even():
    assert split_even(10, 3) == [4, 3, 3]
    assert split_even(2, 4) == [1, 1, 0, 0]


def test_effective_gpus_per_server():
    assert effective_gpus_per_server(list(range(16)), 8) == 8
    assert effective_gpus_per_server([0, 8, 16, 24], 8) == 1          # one GPU per server, same rail
    assert effective_gpus_per_server([0, 1, 8, 9], 8) == 2
    assert effective_gpus_per_server([0, 1, 9, 10], 8) is None         # different rails
    assert effective_gpus_per_server([0, 8, 1, 9], 8) is None          # a server appears twice
    assert effective_gpus_per_server([0, 1], None) is None


@pytest.mark.parametrize("alg", ["ring", "tree", "halving-doubling", "direct"])
@pytest.mark.parametrize("n", [2, 5, 8, 16])
def test_a_send_waits_for_exactly_the_earlier_receives_of_its_chunks(alg, n):
    from traffic.collectives.schedule import send_dependencies
    s = build_schedule("all_reduce", alg, n, 1 << 20)
    tr = s.transfers
    for t, (earlier, gate) in zip(tr, send_dependencies(s)):
        need = {j for j, u in enumerate(tr) if u.dst == t.src and u.step < t.step and set(u.chunks) & set(t.chunks)}
        assert set(earlier) | set(gate) == need
        assert not set(earlier) & set(gate)
        if need:  # followed slice by slice: the latest step's, and those of exactly its chunks
            last = max(tr[j].step for j in need)
            assert set(gate) == {j for j in need if tr[j].step == last or set(tr[j].chunks) == set(t.chunks)}


def test_the_two_trees_of_a_tree_all_reduce_do_not_wait_on_each_other():
    from traffic.collectives.schedule import send_dependencies
    s = build_schedule("all_reduce", "tree", 16, 1 << 20)
    for t, (earlier, gate) in zip(s.transfers, send_dependencies(s)):
        assert not earlier  # a node forwards as all its children's data streams in
        assert all(s.transfers[j].chunks == t.chunks for j in gate)


@pytest.mark.parametrize("n", list(range(1, 70)) + [128, 1000])
def test_nccls_peer_deltas_visit_every_rank_once_in_its_order(n):
    from traffic.collectives.algorithms import _pow2_rounds
    rounds = _pow2_rounds(n)
    order = sorted(rounds, key=rounds.get)
    assert sorted(order) == list(range(n))
    if n == 16:  # init.cc's recurrence by hand: delta += round, modulo 16
        assert order == [0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]


@pytest.mark.parametrize("op,alg,n,g", [
    ("all_to_all", "direct", 16, None), ("all_to_all", "direct", 12, None), ("all_reduce", "direct", 16, None),
    ("all_gather", "direct", 9, None), ("all_to_all", "direct", 32, 4), ("all_to_all", "hierarchical", 32, 4),
    ("all_to_all", "hierarchical", 24, 8)])
def test_a_rank_lists_its_sends_of_a_step_in_nccls_rounds_so_no_receiver_is_everyones_first(op, alg, n, g):
    # Every rank's k-th send of a step goes to a different receiver: were every rank to list its
    # peers from rank 0 up, every first window would arrive at rank 0 (or 1) at once.
    s = build_schedule(op, alg, n, 1 << 24, gpus_per_server=g)
    for step in range(s.num_steps):
        by_src: dict = {}
        for t in s.transfers:
            if t.step == step:
                by_src.setdefault(t.src, []).append(t.dst)
        if not by_src or max(len(v) for v in by_src.values()) < 2:
            continue
        full = [v for v in by_src.values() if len(v) == max(len(v) for v in by_src.values())]
        for k in range(len(full[0])):
            kth = [v[k] for v in full]
            assert len(set(kth)) == len(kth), (step, k, kth)
