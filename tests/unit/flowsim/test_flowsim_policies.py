"""The controller's policies on the flow engine: the same decisions the Ryu controller makes."""
from __future__ import annotations

import os

import numpy as np
import pytest

from controller.routing import compute_routes
from flowsim import EcmpRouter, JobSpec, Net, Params, ShortestRouter, Simulation
from flowsim.control import ControllerRouter
from flowsim.cosched import PhaseGates
from topologies import fat_tree, leaf_spine, rail_optimized
from traffic.trace import Op, Trace
from traffic.workload import build_workload

GB = 1e9


def table_path(fab, src: str, dst: str) -> list[str]:
    """Where the controller's `shortest` tables send a packet from src to dst, switch by switch."""
    ip = fab.node(dst)["ip"]
    node = fab.attachment(src)[0]
    path = [src]
    flows, _ = compute_routes(fab, "shortest")
    while node != dst:
        path.append(node)
        (rule,) = [r for r in flows if r.switch == node and r.table == 0 and r.match.get("ipv4_dst") == ip]
        ((kind, port),) = rule.actions
        assert kind == "output"
        node = next(n for n in fab.graph.neighbors(node) if fab.port(node, n) == port)
    return path + [dst]


@pytest.mark.parametrize("fab", [fat_tree(4), rail_optimized(2, 4, 2), leaf_spine(3, 2, 3)],
                         ids=["fat-tree", "rail", "leaf-spine"])
def test_shortest_takes_the_path_the_controllers_tables_give(fab):
    net = Net.from_fabric(fab)
    hosts = fab.hosts
    pairs = [(a, b) for a in range(len(hosts)) for b in range(len(hosts))
             if a != b and not fab.same_server(hosts[a], hosts[b])]
    src, dst = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
    indptr, links = ShortestRouter().route(net, src, dst, np.zeros(len(pairs), np.uint64))
    for i, (a, b) in enumerate(pairs):
        assert net.node_path(links[indptr[i]:indptr[i + 1]]) == table_path(fab, hosts[a], hosts[b])


def two_flows(router, fab):
    """h0 -> h4 and h1 -> h5 on a fat-tree k=4: same edge, other pod, 4 GB each."""
    tr = Trace(nranks=4, groups={}, ops={
        0: [Op("x", "send", peer=2, size_bytes=4_000_000_000, iteration=0)],
        1: [Op("y", "send", peer=3, size_bytes=4_000_000_000, iteration=0)],
        2: [Op("x", "recv", peer=0, size_bytes=4_000_000_000, iteration=0)],
        3: [Op("y", "recv", peer=1, size_bytes=4_000_000_000, iteration=0)]})
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", ["h0", "h1", "h4", "h5"], tr)], router, Params())
    if isinstance(router, ControllerRouter):
        sim.connect_all()
    return sim, sim.run()


def test_congestion_aware_places_flows_through_the_controllers_flow_scheduler():
    fab = fat_tree(4)
    router = ControllerRouter(fab, "congestion-aware", seed=0)
    sim, res = two_flows(router, fab)
    st = router.state(sim.now)
    assert {(f["src"], f["dst"]) for f in st["flows"]} == {("h0", "h4"), ("h1", "h5")}
    assert [d["action"] for d in st["decisions"]][:2] == ["place", "place"]
    # The second flow sees the first one's natural demand pending on its uplink: another one.
    paths = [tuple(f["path"]) for f in st["flows"]]
    assert paths[0][1] != paths[1][1]
    # Both run at the NIC rate: 4 GB at 50 GB/s.
    assert res.end_s == pytest.approx(4e9 / 50e9, rel=1e-9)
    assert router.status()["counters"]["flows_placed"] == 2


def test_ecmp_can_collide_where_congestion_aware_does_not():
    fab = fat_tree(4)
    ends = []
    for seed in range(40):
        _, res = two_flows(EcmpRouter(seed), fab)
        ends.append(res.end_s)
    # Some seeds hash both flows onto one uplink: twice as long as apart.
    assert min(ends) == pytest.approx(0.08, rel=1e-9) and max(ends) == pytest.approx(0.16, rel=1e-9)


def test_gff_moves_a_flow_off_a_shared_link_at_a_poll():
    """Two elephants forced onto one uplink: the first poll measures them, Global First Fit moves
    one (its natural demand does not fit beside the other), and both then run at the NIC rate."""
    fab = fat_tree(4)
    router = ControllerRouter(fab, "congestion-aware", seed=0, time_scale=0.01)  # polls every 5 ms
    tr = Trace(nranks=4, groups={}, ops={
        0: [Op("x", "send", peer=2, size_bytes=4_000_000_000)], 1: [Op("y", "send", peer=3, size_bytes=4_000_000_000)],
        2: [Op("x", "recv", peer=0, size_bytes=4_000_000_000)], 3: [Op("y", "recv", peer=1, size_bytes=4_000_000_000)]})
    net = Net.from_fabric(fab)
    sim = Simulation(net, [JobSpec("j", ["h0", "h1", "h4", "h5"], tr)], router, Params())
    sim.connect_all()
    flows = router.ctl.sched.flows
    (a, ka), (b, kb) = sorted(router.placed.items())
    flows[kb].path = flows[ka].path  # as if the estimate had missed: both on one uplink
    sim.C_path[b] = router._links(net, b, flows[ka].path)
    res = sim.run()
    st = router.state(sim.now)
    assert [d["action"] for d in st["decisions"]].count("move") == 1
    assert flows[ka].path[1] != flows[kb].path[1]
    # Shared (25 GB/s each) until the move: counters at 2.5 ms (a baseline) and 7.5 ms (rates),
    # poll_done half a period later, at 10 ms; then 50 GB/s each.
    move_s = next(d["time_s"] for d in st["decisions"] if d["action"] == "move")
    assert move_s == pytest.approx(0.01, abs=1e-9)
    assert res.end_s == pytest.approx(move_s + (4e9 - 25e9 * move_s) / 50e9, rel=1e-9)


def test_pace_caps_a_ranks_sends_at_its_share_of_the_nic_inside_the_window():
    fab = leaf_spine(1, 1, 2)
    tr = Trace(nranks=2, groups={}, ops={0: [Op("x", "send", peer=1, size_bytes=int(50e9 * 0.02))],
                                         1: [Op("x", "recv", peer=0, size_bytes=int(50e9 * 0.02))]})
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", ["h0", "h1"], tr)], EcmpRouter(0), Params())
    sim.set_pace(0, 0.5, 0.0, 0.01)  # half the NIC for the first 10 ms
    res = sim.run()
    # 10 ms at 25 GB/s, then the other 0.75 GB at 50 GB/s.
    assert res.end_s == pytest.approx(0.01 + (1e9 - 0.25e9) / 50e9, rel=1e-9)


class FixedController:
    """Answers every announcement with the same offset (a stand-in for the REST answer)."""

    def __init__(self, delay_s, share=None, window=(0.0, 0.0)):
        self.delay_s, self.share, self.window, self.bodies = delay_s, share, window, []

    def announce(self, body, now):
        self.bodies.append((now, body))
        return 200, {"start_offset_s": self.delay_s, "priority": 0, "pace_share": self.share,
                     "pace_from_s": self.window[0], "pace_until_s": self.window[1]}


def test_phase_gates_hold_every_rank_until_the_answers_start():
    tr = build_workload({"collective": "all_reduce", "size_bytes": 1 << 28, "iterations": 2, "compute_ms": 5}, 4)
    fab = leaf_spine(1, 1, 4)
    body = {"version": 1, "job": "j", "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1}], "period_s": 0.01}
    ctl = FixedController(0.003)
    events = []
    gates = PhaseGates({0: {0: (0, body), 1: (0, body)}}, ctl, on_event=events.append)
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0), Params(), phases=gates)
    res = sim.run()
    ar = 2 * 3 / 4 * (1 << 28) / 50e9
    colls = sorted(res.collectives(), key=lambda c: c["iteration"])
    assert colls[0]["start_s"] == pytest.approx(0.005 + 0.003)
    assert colls[1]["start_s"] == pytest.approx(colls[0]["end_s"] + 0.005 + 0.003)
    assert colls[0]["cct_s"] == pytest.approx(ar, rel=1e-6)
    # The second announcement carries the period the announcer measured: from its last phase's
    # begin to this phase being ready (the agents' PhaseGates.period_s), offset not included.
    assert ctl.bodies[1][1]["period_s"] == pytest.approx(ar + 0.005, rel=1e-6)
    assert [e["kind"] for e in events].count("offset") == 8 and [e["kind"] for e in events].count("announce") == 2


def test_a_controller_that_is_away_answers_go_now():
    fab = fat_tree(4)
    router = ControllerRouter(fab, "coschedule", outages=[(0.0, 1.0)])
    tr = build_workload({"collective": "all_reduce", "size_bytes": 1 << 26, "iterations": 1, "compute_ms": 1}, 4)
    body = {"version": 1, "job": "j", "flows": [{"src": "h0", "dst": "h4", "size_bytes": 1}], "period_s": 0.01}
    events = []
    gates = PhaseGates({0: {0: (0, body)}}, router, on_event=events.append)
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", ["h0", "h4", "h8", "h12"], tr)], router, Params(),
                     phases=gates)
    sim.run()
    (ann,) = [e for e in events if e["kind"] == "announce"]
    assert ann["status"] == "fallback" and "away" in ann["reason"]
    assert router.status()["counters"]["rebalances"] == 0  # no polls while it is away


def test_a_restarted_controller_places_the_live_flows_again():
    fab = fat_tree(4)
    router = ControllerRouter(fab, "congestion-aware", seed=0, outages=[(0.02, 0.03)])
    sim, res = two_flows(router, fab)
    assert router.restarts == 1
    st = router.state(sim.now)
    assert {(f["src"], f["dst"]) for f in st["flows"]} == {("h0", "h4"), ("h1", "h5")}
    assert all(f["placed_at_s"] == pytest.approx(0.03) for f in st["flows"])
    assert res.end_s == pytest.approx(0.08, rel=1e-9)


@pytest.mark.parametrize("name", ["two-jobs-coschedule", "three-jobs-contending", "demo", "gpt-small-3d"])
def test_the_agents_announce_the_plans_announcements_scaled_down(name):
    """One derivation (experiment.plan.announcements, real units) for every engine: the agents'
    plans carry it in emulated units, bytes x scale.bytes and seconds x the dilation."""
    import os

    from experiment import model
    from experiment.plan import announcements, build_plans, emulated_bytes, job_traces
    exp = model.load(os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", f"{name}.yaml"),
                     ["sweep={}", "controller.routing=coschedule"])
    fab = exp.fabric()
    plans = {jp.index: {a.iteration: (p.rank, a.body) for p in jp.ranks for a in (p.cosched.announce if p.cosched else ())}
             for jp in build_plans(exp, fab)}
    real = announcements(fab, job_traces(exp, fab))
    assert real.keys() == plans.keys()
    for j in plans:
        assert real[j].keys() == plans[j].keys() and plans[j]
        for it in plans[j]:
            (ra, a), (rb, b) = real[j][it], plans[j][it]
            assert ra == rb and [(f["src"], f["dst"]) for f in a["flows"]] == [(f["src"], f["dst"]) for f in b["flows"]]
            assert [emulated_bytes(f["size_bytes"], exp.scale.bytes) for f in a["flows"]] == \
                [f["size_bytes"] for f in b["flows"]]
            for k in ("period_s", "compute_s", "overlap_s"):
                assert b[k] == pytest.approx(a[k] * exp.scale.dilation, rel=1e-9, abs=1e-12)


EXAMPLE_POLICIES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "policies")


def _stride(policy: str, tmp_path, params=None):
    """Hedera's stride(8) on a k=4 fat-tree, on the flow engine, under a policy."""
    import dtnet

    exp = dtnet.load(os.path.join(EXAMPLE_POLICIES, "dmodk-stride.yaml"),
                     ["sweep={}", "engine=flow", f"controller.policy={policy}"]
                     + [f"controller.params.{k}={v}" for k, v in (params or {}).items()])
    return exp.run(str(tmp_path / policy.replace(":", "_")), log=lambda m: None).summary


def test_a_plug_in_policy_forwards_the_flow_engine_as_it_forwards_the_switches(tmp_path, monkeypatch):
    """D-mod-K (examples/policies, outside dtnet) gives each destination one core: stride(8)
    shares no link, so every flow runs at line rate; ECMP's hashing collides on this seed."""
    monkeypatch.syspath_prepend(EXAMPLE_POLICIES)
    dmodk = _stride("dmodk:DModK", tmp_path)
    ecmp = _stride("ecmp", tmp_path)
    assert dmodk["policy"]["name"] == "dmodk:DModK" and dmodk["controller"]["routing"] == "dmodk:DModK"
    assert dmodk["traffic"]["normalized_throughput"] == pytest.approx(1.0, rel=1e-3)
    assert ecmp["traffic"]["normalized_throughput"] < 0.9


def test_a_plug_in_that_watches_flows_is_driven_by_the_flow_engine(tmp_path, monkeypatch):
    """HotSpot sees every new flow and moves flows off hot links: the model feeds it packet-ins
    and counters as the Ryu app does, and its decisions are the flows' paths."""
    monkeypatch.syspath_prepend(EXAMPLE_POLICIES)
    s = _stride("hotspot:HotSpot", tmp_path, {"moves_per_poll": 2})
    c = s["controller"]["counters"]
    assert c["flows_placed"] == 16 and c["flows_moved"] > 0 and c["hot_links_relieved"] == c["flows_moved"]
    assert s["policy"]["params"]["moves_per_poll"] == 2
    # The controller's clock is the emulator's wall clock: its periods are divided by the dilation.
    dilation = s["model"]["mirrors_scale"]["dilation"]
    assert dilation > 1 and s["controller"]["policy"]["params"]["poll_s"] == pytest.approx(0.5 / dilation)


def test_an_answer_moves_the_connections_the_jobs_opened_before_they_announced(tmp_path):
    """The demo's rings open their connections at the start, before the first announcement;
    the co-scheduler's answer must still put each job's two spine-crossing flows on the two
    spines (the announced placement), as the Ryu app does on the switches."""
    import json

    import dtnet
    exp = dtnet.load(os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", "demo.yaml"),
                     ["sweep={}", "engine=flow", "controller.routing=coschedule", "jobs.0.workload.iterations=2",
                      "jobs.1.workload.iterations=2"])
    out = tmp_path / "demo"
    exp.run(str(out), log=lambda m: None)
    st = json.loads((out / "controller-state.json").read_text())
    moved = [d for d in st["decisions"] if d["action"] == "move"]
    assert moved and all(d["reason"].startswith("announced placement of job") for d in moved)
    crossing = {}
    for f in st["flows"]:
        if len(f["path"]) == 3 and f["job"] is not None:  # rail, spine, rail
            crossing.setdefault(f["job"], []).append(f["path"][1])
    assert sorted(crossing) == ["a", "b"]
    assert all(sorted(spines) == ["spine0", "spine1"] for spines in crossing.values()), crossing
