"""Rank classes in the flow engine: one actor per class of a compact trace, on hand-computable cases,
and equal to simulating every rank where the job is symmetric."""
import numpy as np
import pytest

from flowsim import EcmpRouter, JobSpec, Net, Params, ShortestRouter, Simulation, Straggler
from topologies import rail_optimized, single_switch
from traffic.layout import Layout
from traffic.trace import Op, RankClass, Trace, expand
from traffic.workload import build_workload

GBPS = 8.0  # 1e9 bytes/s
RATE = 1e9
S = 10**9


def compact(tp, dp, pp, classes, families=("tp", "dp")):
    layout = Layout(tp, dp, pp, families=families)
    return Trace(tp * dp * pp, {}, classes=[RankClass(layout.select(sel), ops) for sel, ops in classes],
                 layout=layout)


def run(fab, trace, stragglers=(), **params):
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts[:trace.nranks], trace)], ShortestRouter(),
                     Params(collective_model="bundle", **params), stragglers=stragglers)
    res = sim.run()
    assert res.complete, res.stalled
    return sim, res


def test_a_class_collective_covers_every_group_of_its_family_at_once():
    # tp 2 x dp 2: one class of 4 ranks, an all-reduce in each rank's tp group ({0,1}, {2,3}).
    tr = compact(2, 2, 1, [({"pp": [0]}, [Op("ar", "collective", op="all_reduce", algorithm="ring", group="tp",
                                               size_bytes=S)])])
    sim, res = run(single_switch(4, link_gbps=GBPS), tr)
    assert sim.n_ranks == 1  # one actor simulates the 4 ranks
    (c,) = res.collectives()
    assert c["instances"] == 2 and c["ranks"] == 2
    assert c["cct_s"] == pytest.approx(S / RATE, rel=1e-9)  # a 2-ring moves S per direction
    # Both groups' flows are there: every host link carried S in each direction.
    assert np.allclose(res.link_bytes, S)


def test_groups_that_share_a_link_slow_each_other():
    # The same collective on a rail fabric where both tp groups cross one rail switch's spine link:
    # tp groups {0,1} and {2,3} with GPU g of every server on rail g; 1 spine; ranks 0 and 1 are GPU 0
    # of servers 0 and 1 (one rail), 2 and 3 GPU 0 of servers 2 and 3: every flow stays on rail 0.
    fab = rail_optimized(4, 1, 1, link_gbps=GBPS)
    tr = compact(2, 2, 1, [({"pp": [0]}, [Op("ar", "collective", op="all_reduce", algorithm="ring", group="tp",
                                               size_bytes=S)])])
    _, res = run(fab, tr)
    (c,) = res.collectives()
    assert c["cct_s"] == pytest.approx(S / RATE, rel=1e-9)  # rail0 is non-blocking for them
    fab = single_switch(4, link_gbps=GBPS)
    # dp groups instead ({0,2}, {1,3}), and the host links are the only ones: same time.
    tr = compact(2, 2, 1, [({"pp": [0]}, [Op("ar", "collective", op="all_reduce", algorithm="ring", group="dp",
                                               size_bytes=S)])])
    _, res = run(fab, tr)
    assert res.collectives()[0]["cct_s"] == pytest.approx(S / RATE, rel=1e-9)


def test_a_class_send_by_rule_covers_every_pair_and_queues_behind_the_last():
    # pp 2 x dp 2: stage 0 sends twice to stage 1 ("pp+1"), S each; one connection per pair, in order.
    send = [Op("a", "send", peer="pp+1", size_bytes=S), Op("b", "send", peer="pp+1", size_bytes=S)]
    recv = [Op("a", "recv", peer="pp-1", size_bytes=S), Op("b", "recv", peer="pp-1", size_bytes=S)]
    tr = compact(1, 2, 2, [({"pp": [0]}, send), ({"pp": [1]}, recv)], families=())
    sim, res = run(single_switch(4, link_gbps=GBPS), tr)
    assert sim.n_ranks == 2
    e = {(ev["rank"], ev["op_id"]): ev["end"] for ev in res.op_events()}
    # Each pair's two sends share one connection, first in first out: S/B, then 2 S/B.
    assert e[(2, "a")] == pytest.approx(S / RATE) and e[(2, "b")] == pytest.approx(2 * S / RATE)
    assert np.isclose(res.link_bytes.sum(), 2 * 2 * 2 * S)  # 2 pairs x 2 sends x 2 links each


def test_a_straggler_leaves_its_class_and_its_class_waits_for_it():
    ops = [Op("c", "compute", duration_s=1.0, iteration=0),
           Op("ar", "collective", ("c",), op="all_reduce", algorithm="ring", group="dp", size_bytes=S, iteration=0)]
    tr = compact(1, 4, 1, [({"pp": [0]}, ops)], families=("dp",))
    sim, res = run(single_switch(4, link_gbps=GBPS), tr, stragglers=[Straggler("j", 3, 0.0, 2.0)])
    assert sim.n_ranks == 2 and sorted(len(r) for r in sim.actor_ranks) == [1, 3]
    # The all-reduce starts when rank 3's doubled compute ends: 2 s, then 2 (n-1)/n S / B.
    assert res.iteration_times_s("j")[0] == pytest.approx(2.0 + 1.5 * S / RATE, rel=1e-9)


@pytest.mark.parametrize("spec", ["rail", "switch"])
def test_classes_equal_every_rank_simulated_on_a_symmetric_job(spec):
    fab = rail_optimized(2, 4, 2, link_gbps=400) if spec == "rail" else single_switch(8, link_gbps=400)
    tr = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 4, "iterations": 2}, 8,
                        gpus_per_server=4 if spec == "rail" else None)
    assert len(tr.classes) == 2
    sims = []
    for t in (tr, expand(tr)):
        sims.append(run(fab, t))
    (a, ra), (b, rb) = sims
    assert a.n_ranks == 2 and b.n_ranks == 8
    assert ra.iteration_times_s("j") == pytest.approx(rb.iteration_times_s("j"), rel=1e-9)
    assert np.allclose(ra.link_bytes, rb.link_bytes, rtol=1e-6)


def test_incremental_solves_give_the_rates_of_a_full_solve():
    """Bundles that start and end on shared links: the component solve against a fresh full solve."""
    fab = rail_optimized(4, 2, 1, link_gbps=GBPS)
    tr = build_workload({"model": "gpt-small", "tp": 2, "pp": 2, "dp": 2, "microbatches": 2, "iterations": 1}, 8,
                        gpus_per_server=2)
    net = Net.from_fabric(fab)
    sim = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(3), Params(collective_model="bundle"))
    checks = []
    orig = sim._solve_bundles

    def both():
        orig()
        live = sim._blive_arr()
        if len(live):
            inc = sim.B_rate[live].copy()
            sim._changed.update(sim.B_live)
            orig()
            checks.append(np.allclose(inc, sim.B_rate[live], rtol=1e-9))

    sim._solve_bundles = both
    assert sim.run().complete
    assert checks and all(checks)


def test_the_link_series_coarsens_instead_of_growing_without_bound():
    fab = single_switch(2, link_gbps=GBPS)
    tr = Trace(2, {}, ops={0: [Op("x", "send", peer=1, size_bytes=10 * S)], 1: [Op("x", "recv", peer=0, size_bytes=10 * S)]})
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                     Params(series_bin_s=1e-4))
    sim.max_bins = 100
    res = sim.run()
    assert len(res.series) <= 100 and res.series_bin_s == pytest.approx(1e-4 * 2 ** 10)
    total = sum(v.sum() for _, v in res.series.values())
    assert total == pytest.approx(res.link_bytes.sum(), rel=1e-9)


@pytest.mark.parametrize("op,algorithm", [("all_to_all", "direct"), ("all_reduce", "ring"),
                                          ("all_gather", "ring"), ("reduce_scatter", "ring")])
def test_closed_form_bundle_shapes_equal_their_schedules(op, algorithm):
    """The shapes built without a schedule (rings, direct all-to-all at 10^5 ranks) carry, per
    connection, exactly the bytes the schedule sends over it."""
    from traffic.collectives.templates import bundle_shape, template
    for n, size in ((2, 10), (5, 77), (17, 123456789)):
        b = bundle_shape(op, algorithm, n, size)
        t = template(op, algorithm, n, size)
        pairs, inv = np.unique(t.src * n + t.dst, return_inverse=True)
        got = dict(zip((b.src * n + b.dst).tolist(), b.bytes.tolist()))
        assert got == pytest.approx(dict(zip(pairs.tolist(), np.bincount(inv, weights=t.size).tolist())))


def test_hop_latency_counts_the_fabric_and_host_links_of_each_path_not_nvlink():
    """topology.latency_us as the emulator's netem adds it: per link, none on NVLink."""
    from topologies import fat_tree
    fab = fat_tree(4, link_gbps=GBPS)
    sends = [(0, 1), (0, 2), (0, 4)]  # same edge: 2 links; same pod: 4; across pods: 6
    for (s, d), links in zip(sends, (2, 4, 6)):
        tr = Trace(16, {}, ops={s: [Op("x", "send", peer=d, size_bytes=S)], d: [Op("x", "recv", peer=s, size_bytes=S)]})
        sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], ShortestRouter(),
                         Params(hop_latency_s=1e-3))
        res = sim.run()
        assert res.end_s == pytest.approx(S / RATE + links * 1e-3, rel=1e-9)
    fab = rail_optimized(2, 2, 1, link_gbps=GBPS)  # h0 -> h1 over NVLink: no delay
    tr = Trace(4, {}, ops={0: [Op("x", "send", peer=1, size_bytes=S)], 1: [Op("x", "recv", peer=0, size_bytes=S)]})
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], ShortestRouter(),
                     Params(hop_latency_s=1e-3)).run()
    assert res.end_s == pytest.approx(S / (3600e9 / 8), rel=1e-9)
