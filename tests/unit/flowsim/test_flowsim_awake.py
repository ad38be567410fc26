"""The solve looks only at awake sends (flowsim.rates, "Awake sends"): leaving the asleep ones out
changes no time. Each case runs both ways, the reference looking at every eligible queued send."""
import pytest

from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation, Straggler
from topologies import fat_tree, rail_optimized, single_switch
from traffic.workload import build_workload


def both(fab, trace, stragglers=(), **params):
    out = []
    for skip in (True, False):
        sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts[:trace.nranks], trace)], EcmpRouter(0),
                         Params(**params), stragglers=stragglers)
        sim.skip_asleep = skip
        res = sim.run()
        assert res.complete, res.stalled
        events = sorted((e["rank"], e["op_id"], e["start"], e["end"]) for e in res.op_events())
        out.append((sim, events, res.counters["events"]))
    return out


def coll(n, algorithm, size=1 << 26, gps=None, **extra):
    return build_workload({"collective": "all_reduce", "algorithm": algorithm, "size_bytes": size, **extra}, n,
                          gpus_per_server=gps)


CASES = {
    "ring": lambda: (single_switch(16, link_gbps=400), coll(16, "ring"), {}),
    "ring with latency": lambda: (fat_tree(4, link_gbps=400), coll(16, "ring"), {"latency_s": 5e-6,
                                                                                  "hop_latency_s": 1e-6}),
    "tree": lambda: (fat_tree(4, link_gbps=400), coll(16, "tree"), {}),
    "halving-doubling": lambda: (fat_tree(4, link_gbps=400), coll(16, "halving-doubling"), {}),
    "hierarchical": lambda: (rail_optimized(4, 4, 2, link_gbps=400), coll(16, "hierarchical", gps=4), {}),
    "two iterations with compute": lambda: (single_switch(8, link_gbps=400),
                                            coll(8, "ring", iterations=2, compute_ms=1), {}),
    "gpt-small 3d": lambda: (rail_optimized(2, 4, 2, link_gbps=400),
                             build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 2,
                                             "schedule": "1f1b", "iterations": 1},
                                            8, gpus_per_server=4), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_skipping_asleep_sends_changes_no_time(case):
    fab, trace, params = CASES[case]()
    (fast, ev_fast, n_fast), (ref, ev_ref, n_ref) = both(fab, trace, slice_bytes=1 << 20, **params)
    assert n_fast == n_ref
    assert len(ev_fast) == len(ev_ref)
    for a, b in zip(ev_fast, ev_ref):
        assert a[:2] == b[:2]
        assert a[2] == pytest.approx(b[2], rel=1e-12, abs=1e-15) and a[3] == pytest.approx(b[3], rel=1e-12, abs=1e-15)


def test_a_ring_solves_a_few_sends_per_connection_not_its_whole_schedule():
    """At 32 ranks a ring queues 62 sends per connection at once; a solve looks at a few of them."""
    fab = single_switch(32, link_gbps=400)
    sizes = []
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, coll(32, "ring"))], EcmpRouter(0), Params())
    solve = sim._solve_rates

    def spy():
        solve()
        sizes.append(len(sim._q))
    sim._solve_rates = spy
    assert sim.run().complete
    assert max(sizes) <= 3 * 32 < sim.counters["transfers"]
