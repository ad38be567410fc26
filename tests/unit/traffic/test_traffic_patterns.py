"""Hedera's synthetic patterns as workloads."""
import collections

import pytest

from badinput import InputError
from traffic.workload import build_workload


def _flows(t, it=0):
    return [(r, o.peer) for r, ops in t.ops.items() for o in ops if o.kind == "send" and o.iteration == it]


def test_stride():
    t = build_workload({"pattern": "stride", "stride": 4, "size_bytes": 1000}, 16)
    assert sorted(_flows(t)) == [(x, (x + 4) % 16) for x in range(16)]
    assert all(o.size_bytes == 1000 for ops in t.ops.values() for o in ops if o.kind != "compute")


def test_random_is_seeded_and_never_self():
    a = build_workload({"pattern": "random", "seed": 1, "size_bytes": 10, "iterations": 5}, 16)
    b = build_workload({"pattern": "random", "seed": 1, "size_bytes": 10, "iterations": 5}, 16)
    c = build_workload({"pattern": "random", "seed": 2, "size_bytes": 10, "iterations": 5}, 16)
    assert a == b and a != c
    for it in range(5):
        flows = _flows(a, it)
        assert len(flows) == 16 and all(s != d for s, d in flows)
    assert _flows(a, 0) != _flows(a, 1)  # a new draw per round


@pytest.mark.parametrize("p_edge,p_pod,where", [(1.0, 0.0, "edge"), (0.0, 1.0, "pod"), (0.0, 0.0, "far")])
def test_staggered_extremes(p_edge, p_pod, where):
    t = build_workload({"pattern": "staggered", "p_edge": p_edge, "p_pod": p_pod, "size_bytes": 1, "seed": 3,
                        "iterations": 4}, 16)
    for it in range(4):
        for s, d in _flows(t, it):
            kind = "edge" if s // 2 == d // 2 else "pod" if s // 4 == d // 4 else "far"
            assert kind == where and s != d


def test_staggered_mix_follows_probabilities():
    t = build_workload({"pattern": "staggered", "p_edge": 0.5, "p_pod": 0.3, "size_bytes": 1, "seed": 0,
                        "iterations": 200, "hosts_per_edge": 4, "hosts_per_pod": 8}, 32)
    kinds = collections.Counter()
    for it in range(200):
        for s, d in _flows(t, it):
            kinds["edge" if s // 4 == d // 4 else "pod" if s // 8 == d // 8 else "far"] += 1
    total = sum(kinds.values())
    assert kinds["edge"] / total == pytest.approx(0.5, abs=0.03)
    assert kinds["pod"] / total == pytest.approx(0.3, abs=0.03)


def test_all_to_all_and_incast():
    t = build_workload({"pattern": "all-to-all", "size_bytes": 5}, 6)
    assert sorted(_flows(t)) == [(s, d) for s in range(6) for d in range(6) if s != d]
    t = build_workload({"pattern": "incast", "size_bytes": 5, "dst": 3}, 6)
    assert sorted(_flows(t)) == [(s, 3) for s in range(6) if s != 3]
    assert sum(o.kind == "recv" for o in t.ops[3]) == 5


def test_rounds_are_ordered_per_host():
    t = build_workload({"pattern": "stride", "size_bytes": 1, "iterations": 3}, 4)
    ops = t.ops[0]
    done = [o for o in ops if o.kind == "compute"]
    assert [o.id for o in done] == ["it0/done", "it1/done", "it2/done"]
    assert all(o.deps == ("it0/done",) for o in ops if o.iteration == 1 and o.kind != "compute")


@pytest.mark.parametrize("spec,msg", [
    ({"pattern": "zigzag", "size_bytes": 1}, "workload.pattern: expected one of stride"),
    ({"pattern": "stride", "stride": 16, "size_bytes": 1}, "workload.stride: expected a stride that is not a multiple"),
    ({"pattern": "stride", "size_bytes": 1, "seed": 1}, "workload.seed: expected a known key"),
    ({"pattern": "staggered", "size_bytes": 1, "p_edge": 0.8, "p_pod": 0.5}, "workload.p_pod: expected p_edge + p_pod <= 1"),
    ({"pattern": "staggered", "size_bytes": 1, "hosts_per_pod": 3}, "workload.hosts_per_pod: expected a multiple"),
    ({"pattern": "staggered", "size_bytes": 1, "p_edge": 0.5, "hosts_per_edge": 1, "hosts_per_pod": 4},
     "workload.hosts_per_edge"),
    ({"pattern": "incast", "size_bytes": 1, "dst": 16}, "workload.dst: expected an integer >= 0 and <= 15"),
    ({"pattern": "random"}, "workload.size_bytes: expected a value"),
])
def test_bad_pattern_specs(spec, msg):
    with pytest.raises(InputError) as e:
        build_workload(spec, 16, file="e.yaml")
    assert f"e.yaml: {msg}" in str(e.value), str(e.value)


def test_synchronized_incast_waits_for_every_block_before_asking_again():
    """request_bytes: the receiver's round-k requests go only after its round k-1 is done (every
    block in), and each sender's block only after its request arrived."""
    t = build_workload({"pattern": "incast", "size_bytes": 1000, "dst": 0, "request_bytes": 64,
                        "iterations": 2}, 4)
    recv_ops = {o.id: o for o in t.ops[0]}
    requests = [o for o in t.ops[0] if o.kind == "send" and o.iteration == 1]
    assert len(requests) == 3 and all(o.size_bytes == 64 for o in requests)
    # Round 1's requests wait for the receiver's round-0 "done", which waits for all three blocks.
    (done0,) = {d for o in requests for d in o.deps}
    assert sorted(recv_ops[done0].deps) == sorted(o.id for o in t.ops[0] if o.kind == "recv" and o.iteration == 0
                                                  and o.size_bytes == 1000)
    for s in (1, 2, 3):
        blocks = [o for o in t.ops[s] if o.kind == "send"]
        got = {o.id: o for o in t.ops[s] if o.kind == "recv"}
        assert all(len(b.deps) == 1 and got[b.deps[0]].size_bytes == 64 for b in blocks)
    t.validate()
