"""The flow engine on cases computed by hand: sharing, rings, pipelines, ECMP, faults, stragglers."""
import numpy as np
import pytest

from flowsim import EcmpRouter, Fault, JobSpec, Net, Params, Router, ShortestRouter, Simulation, Straggler
from topologies import fat_tree, leaf_spine, rail_optimized, single_switch
from topologies.fabric import Fabric
from traffic.trace import Op, Trace
from traffic.workload import build_workload

GBPS = 8.0  # 8 Gb/s = 1e9 bytes/s: times come out in round seconds
RATE = GBPS * 1e9 / 8


def collective(n, op="all_reduce", algorithm="ring", size=10**9, iterations=1, compute_ms=0, gps=None):
    return build_workload({"collective": op, "algorithm": algorithm, "size_bytes": size,
                           "iterations": iterations, "compute_ms": compute_ms}, n, gpus_per_server=gps)


def p2p_trace(n, sends):
    """sends: (src, dst, bytes, deps of the send on src as op ids); every recv has no deps."""
    ops = {r: [] for r in range(n)}
    for k, (s, d, b, deps) in enumerate(sends):
        ops[s].append(Op(f"x{k}", "send", tuple(deps), size_bytes=b, peer=d))
        ops[d].append(Op(f"x{k}", "recv", (), size_bytes=b, peer=s))
    return Trace(nranks=n, groups={}, ops=ops)


def run(fab, jobs, router=None, **params):
    net = fab if isinstance(fab, Net) else Net.from_fabric(fab)
    sim = Simulation(net, jobs, router or EcmpRouter(0), Params(**params))
    res = sim.run()
    assert res.complete, res.stalled
    return res


def ends(res, job="j"):
    """(rank, op id) -> end time."""
    return {(e["rank"], e["op_id"]): e["end"] for e in res.op_events() if e["job"] == job}


def test_two_flows_on_one_link_share_it_then_the_longer_speeds_up():
    fab = single_switch(3, link_gbps=GBPS)
    tr = p2p_trace(3, [(0, 2, 10**9, ()), (1, 2, 2 * 10**9, ())])
    e = ends(run(fab, [JobSpec("j", fab.hosts, tr)]))
    # Both share h2's downlink at 0.5 GB/s until the first ends at 2 s; the second has 0.5 GB left.
    assert e[(2, "x0")] == pytest.approx(2.0)
    assert e[(2, "x1")] == pytest.approx(3.0)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_on_one_switch_runs_at_the_link_rate(n):
    fab = single_switch(n, link_gbps=GBPS)
    res = run(fab, [JobSpec("j", fab.hosts, collective(n))])
    (c,) = res.collectives()
    assert c["cct_s"] == pytest.approx(2 * (n - 1) / n * 1e9 / RATE, rel=1e-9)


def line_fabric():
    """Two switches in a line, two hosts on each: one trunk cable between them."""
    fab = Fabric("line", {}, GBPS)
    for s in ("s0", "s1"):
        fab.add_switch(s, "leaf")
    for h in range(4):
        fab.add_host(f"h{h}")
        fab.add_link(f"h{h}", f"s{h // 2}", GBPS, "host")
    fab.add_link("s0", "s1", GBPS, "fabric")
    return fab


def test_a_ring_on_a_line_that_crosses_the_trunk_twice_each_way_runs_at_half_rate():
    fab = line_fabric()
    # Rank order h0 h2 h1 h3: every ring edge crosses the trunk, two in each direction.
    res = run(fab, [JobSpec("j", ["h0", "h2", "h1", "h3"], collective(4))])
    (c,) = res.collectives()
    assert c["cct_s"] == pytest.approx(2 * 3 / 4 * 1e9 / (RATE / 2), rel=1e-9)
    # Same ring in server order: only two edges cross, one each way: full rate.
    res = run(fab, [JobSpec("j", ["h0", "h1", "h2", "h3"], collective(4))])
    assert res.collectives()[0]["cct_s"] == pytest.approx(2 * 3 / 4 * 1e9 / RATE, rel=1e-9)


def test_a_bottleneck_shared_by_three_jobs_gives_each_a_third():
    fab = leaf_spine(2, 1, 3, link_gbps=GBPS)  # 3 hosts per leaf, one spine
    jobs = [JobSpec(f"j{i}", [f"h{i}", f"h{3 + i}"], collective(2, size=(i + 1) * 10**9)) for i in range(3)]
    res = run(fab, jobs)
    cct = {c["job"]: c["cct_s"] for c in res.collectives()}
    # Each 2-rank ring all-reduce sends S each way. Sizes 1, 2, 3 GB over one trunk per direction:
    # a third each until j0 ends at 3 s (1 GB), a half each until j1 ends at 3 + 2*1 = 5 s, j2 alone to 6 s.
    assert cct["j0"] == pytest.approx(3.0)
    assert cct["j1"] == pytest.approx(5.0)
    assert cct["j2"] == pytest.approx(6.0)



@pytest.mark.parametrize("seed", range(8))
def test_ecmp_on_two_paths_shares_what_the_hash_puts_together(seed):
    fab = leaf_spine(2, 2, 2, link_gbps=GBPS)
    net = Net.from_fabric(fab)
    router = EcmpRouter(seed)
    tr = p2p_trace(4, [(0, 2, 10**9, ()), (1, 3, 10**9, ())])
    sim = Simulation(net, [JobSpec("j", fab.hosts, tr)], router, Params())
    res = sim.run()
    spines = [net.node_path(p)[2] for p in sim.C_path]
    e = ends(res)
    expected = 2.0 if spines[0] == spines[1] else 1.0
    assert e[(2, "x0")] == pytest.approx(expected) and e[(3, "x1")] == pytest.approx(expected)
    assert res.router["seed"] == seed


def test_ecmp_hashing_is_seeded_and_spreads():
    fab = leaf_spine(2, 2, 16, link_gbps=GBPS)
    net = Net.from_fabric(fab)
    src, dst = np.arange(16), np.arange(16, 32)
    picks = []
    for seed in range(4):
        indptr, links = EcmpRouter(seed).route(net, src, dst, np.arange(16, dtype=np.uint64) * 7919)
        picks.append([net.node_path(links[indptr[i]:indptr[i + 1]])[2] for i in range(16)])
    again_indptr, again = EcmpRouter(0).route(net, src, dst, np.arange(16, dtype=np.uint64) * 7919)
    assert [net.node_path(again[again_indptr[i]:again_indptr[i + 1]])[2] for i in range(16)] == picks[0]
    assert len({tuple(p) for p in picks}) > 1                 # the seed changes the luck
    assert all(0 < p.count("spine0") < 16 for p in picks)    # and both paths get flows
    # The shortest policy ignores ports: one path per destination whatever the seed.
    ip1, l1 = ShortestRouter().route(net, src, dst, np.zeros(16, np.uint64))
    ip2, l2 = ShortestRouter().route(net, src, dst, np.arange(16, dtype=np.uint64))
    assert (l1 == l2).all()


def test_a_pipelined_chain_streams_and_store_and_forward_does_not():
    n, size, L = 6, 10**9, 10**6
    fab = single_switch(n, link_gbps=GBPS)
    res = run(fab, [JobSpec("j", fab.hosts, collective(n, op="broadcast"))], slice_bytes=L)
    (c,) = res.collectives()
    # The chain streams: one slice of fill per hop after the first, then the bytes once.
    assert c["cct_s"] == pytest.approx((size + (n - 2) * L) / RATE, rel=1e-9)
    # The same chain as point-to-point ops, each forwarding only after its receive is complete.
    sends = [(k, k + 1, size, (f"x{k - 1}",) if k else ()) for k in range(n - 1)]
    tr = p2p_trace(n, sends)
    for r in range(1, n - 1):  # the forward depends on the receive on the same rank
        ops = tr.ops[r]
        recv = next(o for o in ops if o.kind == "recv")
        tr.ops[r] = [recv] + [Op(o.id, o.kind, (recv.id,), size_bytes=o.size_bytes, peer=o.peer)
                              for o in ops if o.kind == "send"]
    res = run(fab, [JobSpec("j", fab.hosts, tr)])
    assert max(ends(res).values()) == pytest.approx((n - 1) * size / RATE, rel=1e-9)


def test_bundle_matches_detailed_on_rings_including_ecmp_collisions():
    fab = rail_optimized(4, 4, 2, link_gbps=GBPS)
    hosts = fab.hosts
    for seed in range(3):
        out = {}
        for model in ("detailed", "bundle"):
            res = run(fab, [JobSpec("j", hosts, collective(16, size=10**8))], router=EcmpRouter(seed),
                      collective_model=model, slice_bytes=16384)
            out[model] = res.collectives()[0]["cct_s"]
        assert out["bundle"] == pytest.approx(out["detailed"], rel=0.01)


def test_latency_bound_ring_costs_a_latency_and_a_slice_per_step():
    n, size, lat, L = 16, 16 * 16384, 5e-6, 16384
    fab = single_switch(n, link_gbps=GBPS)
    for model in ("detailed", "bundle"):
        res = run(fab, [JobSpec("j", fab.hosts, collective(n, size=size))], latency_s=lat, slice_bytes=L,
                  collective_model=model)
        steps = 2 * (n - 1)
        assert res.collectives()[0]["cct_s"] == pytest.approx(steps * (lat + L / RATE), rel=0.02)


def test_compute_runs_one_at_a_time_and_a_straggler_is_slower():
    ops = {0: [Op("a", "compute", duration_s=1.0), Op("b", "compute", duration_s=2.0)]}
    tr = Trace(nranks=1, groups={}, ops=ops)
    fab = single_switch(1, link_gbps=GBPS)
    e = ends(run(fab, [JobSpec("j", fab.hosts, tr)]))
    assert e[(0, "a")] == pytest.approx(1.0) and e[(0, "b")] == pytest.approx(3.0)
    net = Net.from_fabric(fab)
    res = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                     stragglers=[Straggler("j", 0, from_s=0.5, factor=3.0)]).run()
    e = ends(res)
    assert e[(0, "a")] == pytest.approx(1.0) and e[(0, "b")] == pytest.approx(1.0 + 6.0)


def test_iterations_and_job_start():
    fab = single_switch(4, link_gbps=GBPS)
    tr = collective(4, iterations=3, compute_ms=500)
    res = run(fab, [JobSpec("j", fab.hosts, tr, start_s=2.0)])
    its = res.iteration_times_s("j")
    assert its == pytest.approx([0.5 + 1.5] * 3)
    assert min(e["start"] for e in res.op_events()) == pytest.approx(2.0)


def test_a_link_down_reroutes_and_the_run_finishes_later():
    fab = leaf_spine(2, 2, 1, link_gbps=GBPS)
    tr = p2p_trace(2, [(0, 1, 10**9, ())])
    net = Net.from_fabric(fab)
    sim = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(0), Params())
    sim.run()
    spine = net.node_path(sim.C_path[0])[2]
    # The same flow, with its spine's uplink cut at 0.5 s and back at 0.75 s: it moves to the other spine.
    net = Net.from_fabric(fab)
    sim = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(0), Params(),
                     faults=[Fault(0.5, "leaf0", spine), Fault(0.75, "leaf0", spine, up=True)])
    res = sim.run()
    assert res.complete and res.counters["reroutes"] >= 1
    assert max(ends(res).values()) == pytest.approx(1.0)  # the other spine is as fast: no loss
    # With both spines cut, nothing can get through: the run says so instead of hanging.
    net = Net.from_fabric(fab)
    res = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(0), Params(),
                     faults=[Fault(0.5, "spine0"), Fault(0.5, "spine1")]).run()
    assert not res.complete and "without a route" in res.stalled


def test_nvlink_inside_a_server_and_the_fabric_between():
    fab = rail_optimized(2, 2, 1, link_gbps=GBPS, nvlink_gbps=4 * GBPS)
    tr = p2p_trace(4, [(0, 1, 10**9, ()), (0, 2, 10**9, ())])
    e = ends(run(fab, [JobSpec("j", fab.hosts, tr)]))
    assert e[(1, "x0")] == pytest.approx(0.25)  # NVLink at 4x
    assert e[(2, "x1")] == pytest.approx(1.0)   # the NIC


class MoveToEmptiestSpine(Router):
    """A toy congestion-aware policy: at each poll, move every flow to the spine whose uplink
    from the flow's leaf carries the least load, using only the observation."""

    name = "toy"
    poll_s = 0.1

    def __init__(self):
        super().__init__()
        self.base = EcmpRouter(0)
        self.seen = []

    def hop_choice(self, key, dst_host, switch):
        return np.zeros(len(key), np.uint64)  # everything on the first spine to begin with

    def poll(self, now_s, obs):
        self.seen.append((now_s, obs.link_rate_Bps.sum(), len(obs.conn_ids)))
        moves = {}
        load = obs.link_rate_Bps.copy()
        for c, src, dst, path, rate in zip(obs.conn_ids, obs.conn_src, obs.conn_dst, obs.conn_paths,
                                           obs.conn_rate_Bps):
            cands = self.equal_cost_paths(obs.net, int(src), int(dst))
            load[path] -= rate
            best = min(cands, key=lambda p: (load[p].max(), tuple(p)))
            load[best] += rate
            moves[int(c)] = best
        return moves


def test_a_policy_sees_the_model_loads_and_moves_flows_during_the_run():
    fab = leaf_spine(2, 2, 2, link_gbps=GBPS)
    tr = p2p_trace(4, [(0, 2, 10**9, ()), (1, 3, 10**9, ())])
    policy = MoveToEmptiestSpine()
    res = run(fab, [JobSpec("j", fab.hosts, tr)], router=policy)
    # Both start on spine0 at half rate; at the first poll (0.1 s) one moves: 0.05 GB done each,
    # then each alone: 0.1 + 0.95 = 1.05 s.
    assert max(ends(res).values()) == pytest.approx(1.05)
    assert res.counters["reroutes"] == 1 and res.counters["polls"] >= 1
    assert policy.seen[0][2] == 2 and policy.seen[0][1] == pytest.approx(2 * 4 * RATE / 2)  # two flows, four links each


def test_link_bytes_add_up_to_bytes_times_hops_and_the_series_to_the_totals():
    fab = fat_tree(4, link_gbps=GBPS)
    res = run(fab, [JobSpec("j", fab.hosts, collective(16, size=10**8))], series_bin_s=0.01)
    (c,) = res.collectives()
    per_rank = 2 * 15 / 16 * 10**8
    net = Net.from_fabric(fab)
    ups = [net.link(h, fab.attachment(h)[0]) for h in fab.hosts]
    assert res.link_bytes[ups] == pytest.approx(np.full(16, per_rank), rel=1e-6)
    binned = np.zeros(net.n_links)
    for ids, b in res.series.values():
        np.add.at(binned, ids, b)
    assert binned == pytest.approx(res.link_bytes, rel=1e-9, abs=1e-3)
    rows = res.link_series()
    assert len(rows) and ((0 <= rows.util) & (rows.util <= 1 + 1e-9)).all()


def test_outputs_say_a_model_made_them():
    fab = single_switch(2, link_gbps=GBPS)
    res = run(fab, [JobSpec("j", fab.hosts, collective(2))])
    s = res.summary()
    assert s["engine"] == "flow" and s["assumptions"]["model"] == "fluid max-min"
    assert any("slice" in x for x in s["assumptions"]["statements"])
