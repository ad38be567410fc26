"""Congestion-aware routing and co-scheduling, with time driven by hand.

``Sim`` (controller.testing) closes the loop without a switch: packets go through
the fake OpenFlow network, the links they cross count bytes, and the counters go
back to the controller as port and flow statistics.
"""
import itertools
import json
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core import FabricController
from controller.cosched import MAX_BODY_BYTES
from controller.fakeof import FakeNetwork
from controller.flows import FlowKey
from controller.hedera import estimate_demands, global_first_fit, path_links
from controller.load import LinkLoad
from controller.routing import equal_cost_paths
from controller.rules import FlowDelete
from controller.testing import GBPS, Sim
from topologies import fat_tree, leaf_spine, single_switch

# -- link load ---------------------------------------------------------------
def test_link_load_is_an_ewma_of_counter_deltas_in_real_units():
    fabric = leaf_spine(2, 1, 1, link_gbps=400)
    load = LinkLoad(fabric, link_scale=1e-3, tau_s=0.5)
    port = fabric.port("leaf0", "spine0")
    emu_bytes_per_s = 200e9 * 1e-3 / 8  # 200 Gb/s real at 1/1000 scale
    load.observe("leaf0", port, 0, 0, 0.0)
    load.observe("leaf0", port, int(emu_bytes_per_s), 0, 1.0)
    assert load.load("leaf0", "spine0") == pytest.approx(200, rel=1e-6)
    assert load.utilization("leaf0", "spine0") == pytest.approx(0.5, rel=1e-6)
    load.observe("leaf0", port, int(emu_bytes_per_s), 0, 2.0)  # idle for a second
    assert 0 < load.load("leaf0", "spine0") < 200 * 0.2  # decays by exp(-2)
    load.observe("leaf0", port, 10, 0, 3.0)  # counter reset: rebaseline, no negative rate
    assert load.load("leaf0", "spine0") >= 0
    # A host port's rx counts the host -> switch direction.
    hport = fabric.port("leaf0", "h0")
    load.observe("leaf0", hport, 0, 0, 0.0)
    load.observe("leaf0", hport, 0, int(emu_bytes_per_s), 1.0)
    assert load.load("h0", "leaf0") == pytest.approx(200, rel=1e-6)


# -- new flows ---------------------------------------------------------------
def test_new_flow_avoids_a_congested_link():
    sim = Sim(fat_tree(4))
    hot = sim.start("h8", "h12", 400, sport=1)  # pod 2 -> pod 3: occupies one core link
    sim.step()
    hot_links = set(sim.path(hot).links)
    hot_core = next((a, b) for a, b in hot_links if a.startswith("agg") and b.startswith("core"))
    # New flows from pod 2's other edge also leave through agg2_* -> core.
    for sport in range(10, 20):
        k = sim.start("h10", "h14", 10, sport=sport)
        assert hot_core not in sim.path(k).links


def test_simultaneous_new_flows_spread_before_counters_show_them():
    sim = Sim(fat_tree(4))
    keys = [sim.start(f"h{i}", f"h{i + 4}", 400) for i in range(4)]  # pod 0 -> pod 1, same instant
    assert max(sim.link_flows().values()) == 1  # four disjoint paths: no shared link
    assert len({sim.path(k).switches for k in keys}) == 4


def test_known_flow_is_placed_once_and_unknown_addresses_are_ignored():
    sim = Sim(fat_tree(4))
    sim.start("h0", "h5", 10)
    sw, port = sim.fabric.attachment("h0")
    dpid = sim.fabric.node(sw)["dpid"]
    assert sim.ctl.packet_in_flow(dpid, port, sim.key("h0", "h5"), 1.0) == []
    assert sim.ctl.packet_in_flow(dpid, port, FlowKey("10.0.0.1", "10.9.9.9", 6, 1, 2), 1.0) == []


def test_ecmp_policy_places_nothing():
    fabric = fat_tree(4)
    ctl = FabricController(fabric, "ecmp")
    assert ctl.packet_in_flow(1, 1, FlowKey("10.0.0.1", "10.0.0.2", 6, 1, 2), 0.0) == []
    assert ctl.poll_done(1.0) == []


# -- Hedera --------------------------------------------------------------------
def test_demand_estimation_single_sender_splits_its_nic():
    assert estimate_demands([("a", "x"), ("a", "y"), ("a", "z")]) == pytest.approx([1 / 3] * 3)


def test_demand_estimation_receiver_limited():
    # Three senders into x; c also sends to y. x's share is 1/3 each, so c's
    # flow to y gets the rest of c's NIC.
    d = estimate_demands([("a", "x"), ("b", "x"), ("c", "x"), ("c", "y")])
    assert d == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3])


def test_demand_estimation_mixed_small_and_large_into_one_receiver():
    # a sends to x and y (0.5 each); b, c only to x. x is oversubscribed
    # (2.5): a's 0.5 is above the fair 1/3, so all three get 1/3, and a->y
    # then takes the 2/3 left of a's NIC.
    d = estimate_demands([("a", "x"), ("a", "y"), ("b", "x"), ("c", "x")])
    assert d == pytest.approx([1 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert sum(d[i] for i in (0, 2, 3)) == pytest.approx(1.0)


def stride(fabric, n):
    hosts = fabric.hosts
    return [(hosts[i], hosts[(i + n) % len(hosts)]) for i in range(len(hosts))]


@pytest.mark.parametrize("k,step", [(4, 4), (4, 8), (6, 9), (8, 16)])
def test_gff_places_stride_without_exceeding_any_link(k, step):
    """Hedera's stride pattern: every host sends at line rate to the host
    `step` away; ECMP hashing collides, first fit over all paths does not."""
    fabric = fat_tree(k)
    pairs = stride(fabric, step)
    demands = [400.0 * d for d in estimate_demands(pairs)]
    cands = [[path_links(s, p, d) for p in equal_cost_paths(fabric, s, d)] for s, d in pairs]
    cap = {}
    for a, b, e in fabric.graph.edges(data=True):
        cap[a, b] = cap[b, a] = e["link_gbps"]
    chosen, reserved = global_first_fit(demands, cands, cap.__getitem__)
    assert None not in chosen
    assert max(reserved[ln] / cap[ln] for ln in reserved) <= 1.0 + 1e-9


def test_gff_leaves_a_flow_that_fits_nowhere():
    chosen, _ = global_first_fit([2.0], [[[("a", "b")]]], lambda ln: 1.0)
    assert chosen == [None]


# -- rebalancing ---------------------------------------------------------------
def colliding_sim(**cfg):
    """Two elephants forced onto one core link by ECMP-like first placement."""
    sim = Sim(fat_tree(4), **cfg)
    a = sim.start("h0", "h4", 400, sport=1)
    path_a = sim.ctl.sched.flows[a].path
    # Pin the second flow onto the same path, as a hash collision would.
    sim.ctl.policy.pinned[("h1", "h5")] = (None, path_a, None)
    b = sim.start("h1", "h5", 400, sport=2)
    del sim.ctl.policy.pinned[("h1", "h5")]
    assert sim.ctl.sched.flows[b].path == path_a
    return sim, a, b


def test_rebalance_moves_a_colliding_elephant_and_then_holds_still():
    sim, a, b = colliding_sim(hold_s=2.0)
    sim.step()  # first counters: rates not known yet
    plan = sim.step()
    assert plan, "GFF should move one of the colliding flows"
    assert max(n for ln, n in sim.link_flows().items()) == 1
    moved = sim.ctl.state(sim.now)["counters"]["flows_moved"]
    for _ in range(6):  # stable afterwards: no flapping
        assert sim.step() == []
    assert sim.ctl.state(sim.now)["counters"]["flows_moved"] == moved


def test_min_hold_time_blocks_an_early_second_move():
    sim, a, b = colliding_sim(hold_s=100.0)
    f = sim.ctl.sched.flows[b]
    f.moved_at_s = sim.now  # just moved
    sim.ctl.sched.flows[a].moved_at_s = sim.now
    sim.step()
    assert sim.step() == []  # both held: nothing moves even though they collide
    sim.ctl.sched.flows[a].moved_at_s = sim.ctl.sched.flows[b].moved_at_s = -1000.0
    assert sim.step() != []


def test_reroute_is_make_before_break():
    sim = Sim(fat_tree(4))
    k = sim.start("h0", "h4", 10)
    f = sim.ctl.sched.flows[k]
    old = sim.path(k).switches
    for new in equal_cost_paths(sim.fabric, "h0", "h4"):
        if new == f.path:
            continue
        plan = sim.ctl.sched.reroute_plan(f, new)
        deletes = [i for i, stage in enumerate(plan) if any(isinstance(op, FlowDelete) for op in stage)]
        assert deletes in ([], [len(plan) - 1])  # removal, if any, comes last
        for stage in plan:
            for op in stage:  # any order inside a stage: check after every op
                sim.net.apply([op])
                t = sim.path(k)
                assert t.switches in (old, new)
        assert sim.path(k).switches == new
        f.path, old = new, new


def test_link_down_reroutes_routes_and_placed_flows():
    sim = Sim(fat_tree(4))
    k = sim.start("h0", "h4", 100)
    a, b = next((a, b) for a, b in sim.path(k).links if a.startswith("agg") and b.startswith("core"))
    sim.net.set_link(a, b, up=False)
    dpid = sim.fabric.node(a)["dpid"]
    sim.apply(sim.ctl.port_status(dpid, sim.fabric.port(a, b), False, 1.0))
    assert (a, b) not in sim.path(k).links
    for src, dst in itertools.permutations(sim.fabric.hosts, 2):
        traces = [t for t in sim.net.all_traces(src, dst, sport=7) if t.outcome != "controller"]
        assert traces and all(t.delivered for t in traces), (src, dst)
    # Back up: routes use the link again.
    sim.net.set_link(a, b, up=True)
    sim.apply(sim.ctl.port_status(dpid, sim.fabric.port(a, b), True, 2.0))
    used = {ln for t in sim.net.all_traces("h2", "h6") for ln in t.links}
    assert (a, b) in used or (b, a) in used or sim.ctl.down == set()


def test_link_down_at_the_ingress_replaces_the_stale_entry():
    """Found on real OVS: once the ingress has one way left, its per-flow entry
    still pointed at the dead port."""
    sim = Sim(leaf_spine(2, 2, 1))
    for sport in range(1, 9):
        sim.start("h0", "h1", 10, sport=sport)
    dead = sim.path(sim.key("h0", "h1", 1)).switches[1]
    sim.net.set_link("leaf0", dead, up=False)
    sim.apply(sim.ctl.port_status(sim.fabric.node("leaf0")["dpid"], sim.fabric.port("leaf0", dead), False, 1.0))
    for key in sim.rates:
        assert dead not in sim.path(key).switches


@settings(max_examples=25, deadline=None)
@given(fabric=st.one_of(st.builds(fat_tree, st.sampled_from([2, 4])),
                        st.builds(leaf_spine, st.integers(2, 4), st.integers(1, 3), st.integers(1, 3))),
       data=st.data())
def test_property_random_flow_sets_stay_delivered_on_equal_cost_paths(fabric, data):
    sim = Sim(fabric)
    hosts = fabric.hosts
    n = data.draw(st.integers(1, 12))
    for i in range(n):
        src, dst = data.draw(st.lists(st.sampled_from(hosts), min_size=2, max_size=2, unique=True))
        if sim.key(src, dst, 1000 + i) in sim.ctl.sched.flows:
            continue
        sim.start(src, dst, data.draw(st.sampled_from([1.0, 100.0, 400.0])), sport=1000 + i)
    for _ in range(4):
        sim.step()
        for key, (src, dst, sport, _) in sim.rates.items():
            t = sim.path(key)
            assert t.switches in equal_cost_paths(fabric, src, dst)


# -- co-scheduling -------------------------------------------------------------
def announce(ctl, job, flows, period_s=1.0, now=0.0, **kw):
    body = {"version": 1, "job": job, "collective": "all_reduce", "period_s": period_s,
            "flows": [{"src": s, "dst": d, "size_bytes": b} for s, d, b in flows], **kw}
    code, ans = ctl.announce(json.dumps(body).encode(), now)
    assert code == 200, ans
    return ans


def bytes_for(seconds, gbps=400):
    return int(seconds * gbps * GBPS)


def test_two_periodic_jobs_on_one_link_are_shifted_to_interleave():
    fabric = single_switch(4)  # the link into h3 is shared
    ctl = FabricController(fabric, "coschedule")
    a = announce(ctl, "a", [("h0", "h3", bytes_for(0.4))], now=0.0)
    b = announce(ctl, "b", [("h1", "h3", bytes_for(0.4))], now=0.0)
    assert a["start_offset_s"] == 0
    assert 0.4 - 1e-9 <= b["start_offset_s"] <= 0.6 + 1e-9


def test_three_jobs_take_three_slots():
    fabric = single_switch(4)
    ctl = FabricController(fabric, "coschedule")
    offs = [announce(ctl, j, [(h, "h3", bytes_for(0.3))])["start_offset_s"]
            for j, h in (("a", "h0"), ("b", "h1"), ("c", "h2"))]
    slots = sorted(offs)
    assert slots[0] == 0 and all(b - a >= 0.3 - 1e-9 for a, b in zip(slots, slots[1:]))
    assert slots[-1] + 0.3 <= 1.0 + 1e-9


def test_jobs_on_disjoint_links_start_at_once_and_get_disjoint_paths():
    fabric = fat_tree(4)
    ctl = FabricController(fabric, "coschedule")
    a = announce(ctl, "a", [("h0", "h4", bytes_for(0.4))])
    b = announce(ctl, "b", [("h1", "h5", bytes_for(0.4))])
    pa, pb = a["placements"][0]["path"], b["placements"][0]["path"]
    assert set(zip(pa, pa[1:])).isdisjoint(zip(pb, pb[1:]))
    assert a["start_offset_s"] == b["start_offset_s"] == 0


def test_announced_placement_is_what_the_flow_gets():
    fabric = fat_tree(4)
    sim = Sim(fabric, "coschedule")
    a = announce(sim.ctl, "a", [("h0", "h4", bytes_for(0.4))])
    k = sim.start("h0", "h4", 100, sport=12345)
    assert list(sim.path(k).switches) == a["placements"][0]["path"]
    assert sim.ctl.sched.flows[k].job == "a"


def test_an_answer_moves_the_jobs_open_flows_onto_its_paths():
    """Agents and programs connect before they announce and keep their connections: the
    answer's paths must apply to those too, not only to flows opened after it."""
    fabric = fat_tree(4)
    sim = Sim(fabric, "coschedule")
    b = sim.announce("b", [("h1", "h5", bytes_for(0.4))])
    taken = tuple(b["placements"][0]["path"])
    sim.ctl.policy.pinned[("h0", "h4")] = (None, taken, None)  # placed where b's phase goes
    k = sim.start("h0", "h4", 100, sport=1)
    del sim.ctl.policy.pinned[("h0", "h4")]
    back = sim.start("h4", "h0", 1, sport=2)  # the other direction is not announced
    back_path = sim.flow(back).path
    assert sim.flow(k).path == taken
    a = sim.announce("a", [("h0", "h4", bytes_for(0.4))])
    want = tuple(a["placements"][0]["path"])
    assert want != taken
    assert sim.path(k).switches == want  # the fake switches carry it there, not only the record
    assert sim.flow(k).job == "a" and sim.flow(back).path == back_path
    assert sim.ctl.take_announce_plan() == []  # handed over once
    moves = [d for d in sim.ctl.sched.decisions if d["action"] == "move"]
    assert [d["reason"] for d in moves] == ["announced placement of job a"]
    sim.announce("a", [("h0", "h4", bytes_for(0.4))])  # the same answer again: nothing to move
    assert len([d for d in sim.ctl.sched.decisions if d["action"] == "move"]) == 1


def test_a_flow_already_on_its_announced_path_stays_and_is_the_jobs():
    sim = Sim(fat_tree(4), "coschedule")
    k = sim.start("h0", "h4", 100, sport=1)
    a = sim.announce("a", [("h0", "h4", bytes_for(0.4))])
    assert sim.path(k).switches == tuple(a["placements"][0]["path"]) and sim.flow(k).job == "a"


def test_an_answer_whose_path_cannot_be_installed_still_answers_and_is_recorded():
    from controller.cosched import Answer, AnsweredPath
    from controller.policies.coschedule import CoSchedule

    class Bad(CoSchedule):
        def announce(self, now, ann, obs):
            return Answer(ann.job, coschedule=True, placements=(AnsweredPath("h0", "h4", ("edge0_0", "core0")),))

    fabric = fat_tree(4)
    sim = Sim(fabric, Bad(fabric))
    k = sim.start("h0", "h4", 100, sport=1)
    before = sim.flow(k).path
    assert sim.announce("a", [("h0", "h4", bytes_for(0.4))])["job"] == "a"
    assert sim.flow(k).path == before and sim.ctl.take_announce_plan() == []
    (fail,) = sim.ctl.failures
    assert fail["hook"] == "announce" and "does not run from" in fail["error"]


def test_a_job_keeps_its_paths_when_its_own_traffic_is_what_loads_them():
    """The links' measured load includes the job's own last phase: announcing again must not
    move the job off the path that load is on (no move decisions at all)."""
    sim = Sim(fat_tree(4), "coschedule")
    a = sim.announce("a", [("h0", "h4", bytes_for(0.4))])
    k = sim.start("h0", "h4", 400, sport=1)
    for _ in range(4):
        sim.step()
    first = tuple(a["placements"][0]["path"])
    assert sim.path(k).switches == first
    assert sim.announce("a", [("h0", "h4", bytes_for(0.4))])["placements"][0]["path"] == list(first)
    assert not [d for d in sim.ctl.sched.decisions if d["action"] == "move"]


def test_priority_follows_gpu_intensity():
    fabric = single_switch(6)
    ctl = FabricController(fabric, "coschedule")
    announce(ctl, "light", [("h0", "h1", bytes_for(0.1))], compute_s=0.1)  # I = 1
    announce(ctl, "heavy", [("h2", "h3", bytes_for(0.1))], compute_s=0.8)  # I = 8
    announce(ctl, "mid", [("h4", "h5", bytes_for(0.1))], compute_s=0.4, gpus=1)  # I = 4
    prio = {j["job"]: j["priority"] for j in ctl.state(0.0)["jobs"]}
    assert prio["heavy"] < prio["mid"] < prio["light"]


@pytest.mark.parametrize("body,word", [
    (b"{", "JSON"),
    (b"[]", "object"),
    (json.dumps({"version": 2, "job": "a", "period_s": 1, "flows": []}).encode(), "version"),
    (json.dumps({"version": 1, "job": "a", "period_s": 1}).encode(), "flows"),
    (json.dumps({"version": 1, "job": "a", "period_s": -1,
                 "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1}]}).encode(), "period_s"),
    (json.dumps({"version": 1, "job": "a", "period_s": 1, "colour": 1,
                 "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1}]}).encode(), "colour"),
    (json.dumps({"version": 1, "job": "a", "period_s": 1,
                 "flows": [{"src": "h0", "dst": "h99", "size_bytes": 1}]}).encode(), "flows[0].dst"),
    (b" " * (MAX_BODY_BYTES + 1), "bytes"),
])
def test_bad_announcements_get_a_one_line_400(body, word):
    ctl = FabricController(single_switch(2), "coschedule")
    code, ans = ctl.announce(body, 0.0)
    assert code == 400 and word in ans["error"] and "\n" not in ans["error"]


def test_announce_without_coscheduling_says_go_now():
    ctl = FabricController(single_switch(2), "ecmp")
    ans = announce(ctl, "a", [("h0", "h1", 100)])
    assert ans["start_offset_s"] == 0 and ans["coschedule"] is False


def test_state_reports_loads_flows_and_decisions():
    sim = Sim(fat_tree(4))
    sim.start("h0", "h4", 200)
    sim.step()
    sim.step()
    state = sim.ctl.state(sim.now)
    json.dumps(state)  # must serialize
    assert state["flows"][0]["src"] == "h0" and state["flows"][0]["rate_gbps"] == pytest.approx(200)
    assert state["decisions"][0]["action"] == "place"
    assert any(ln["load_gbps"] == pytest.approx(200, rel=0.01) for ln in state["link_loads"])


def test_ack_streams_do_not_hide_a_collision_of_symmetric_elephants():
    """stride(n/2): h0<->h8 and h1<->h9 each carry data both ways, so every
    host pair also has the other connection's ACK stream. Those must not halve
    the data flows' demands, or GFF sees two half-rate flows that 'fit' one
    link and leaves a collision in place."""
    fab = fat_tree(4)
    sim = Sim(fab, hold_s=0.0)
    data = []
    for a, b in (("h0", "h8"), ("h1", "h9")):
        for s, d, sport in ((a, b, 1000 + int(a[1:])), (b, a, 2000 + int(a[1:]))):
            data.append(sim.start(s, d, 400, sport=sport))
    first = sim.ctl.sched.flows[data[0]]
    # Force the second pair's forward flow onto the first one's path: a collision.
    other = sim.ctl.sched.flows[data[2]]
    sim.apply(sim.ctl.sched.reroute_plan(other, first.path))
    other.path = first.path
    # ACK streams: the reverse of each data connection, small but separate flows.
    for k in list(data):
        src, dst, sport, _ = sim.rates[k]
        key = FlowKey(k.dst_ip, k.src_ip, 6, k.dport, k.sport)
        sw, port = fab.attachment(dst)
        sim.apply(sim.ctl.packet_in_flow(fab.node(sw)["dpid"], port, key, sim.now))
        sim.rates[key] = (dst, src, None, 4)
        assert sim.ctl.sched.flows[key].reply
    collided = max(n for ln, n in sim.link_flows().items() if all(fab.node(x)["role"] == "switch" for x in ln))
    assert collided >= 2
    for _ in range(4):
        sim.step()
    per_link = defaultdict(int)
    for k in data:
        for ln in sim.path(k).links:
            per_link[ln] += 1
    assert max(per_link.values()) == 1, "two data elephants still share a link"


def test_a_rebalance_records_when_it_was_observed_decided_and_installed():
    sim, a, b = colliding_sim(hold_s=2.0)
    sim.step()
    plan = sim.step()
    assert plan
    rec = sim.ctl.reroute_record(plan, sim.now + 0.01)
    assert rec["observed_s"] == sim.now and rec["installed_s"] is None and rec["operations"] >= 1
    sim.ctl.reroute_installed(rec, sim.now + 0.02)
    (got,) = sim.ctl.state(sim.now)["reroutes"]
    assert got["installed_s"] - got["observed_s"] == pytest.approx(0.02)
