"""Routing policy, checked by where packets go in a fake OpenFlow network."""
import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badinput import InputError
from controller.fakeof import FakeNetwork, FakeOFError
from controller.routing import compute_routes, equal_cost_paths
from controller.rules import FlowRule, GroupDelete, GroupRule, RuleError
from topologies import Fabric, fat_tree, from_spec, leaf_spine, rail_optimized, single_switch

FABRICS = {
    "single-1": lambda: single_switch(1),
    "single-5": lambda: single_switch(5),
    "fat-tree-2": lambda: fat_tree(2),
    "fat-tree-4": lambda: fat_tree(4),
    "fat-tree-6": lambda: fat_tree(6),
    "fat-tree-4-over2": lambda: fat_tree(4, oversubscription=2),
    "leaf-spine-3x2x2": lambda: leaf_spine(3, 2, 2),
    "leaf-spine-1x0x3": lambda: leaf_spine(1, 0, 3),
    "rail-2x4x2": lambda: rail_optimized(2, 4, 2),
    "rail-3x2x1": lambda: rail_optimized(3, 2, 1),
    "rail-4x1x0": lambda: rail_optimized(4, 1, 0),
    "rail-1x4x0": lambda: rail_optimized(1, 4, 0),  # rails disjoint: cross-rail needs NVLink
}


def network(fabric, policy):
    flows, groups = compute_routes(fabric, policy)
    net = FakeNetwork(fabric)
    net.install(flows, groups)
    return net


_ORACLE = {}


def oracle_paths(fabric, src, dst):
    """Every shortest switch path, straight from networkx: the independent check."""
    s, d = fabric.attachment(src)[0], fabric.attachment(dst)[0]
    key = (id(fabric), s, d)
    if key not in _ORACLE:
        g = _ORACLE.setdefault((id(fabric), "graph"), (fabric, fabric.switch_graph()))[1]
        _ORACLE[key] = {tuple(p) for p in nx.all_shortest_paths(g, s, d)} if nx.has_path(g, s, d) else set()
    return _ORACLE[key]


def pairs(fabric):
    return list(itertools.permutations(fabric.hosts, 2))


@pytest.mark.parametrize("name", FABRICS)
def test_ecmp_delivers_every_pair_over_every_equal_cost_path(name):
    fabric = FABRICS[name]()
    net = network(fabric, "ecmp")
    for src, dst in pairs(fabric):
        expected = oracle_paths(fabric, src, dst)
        traces = net.all_traces(src, dst)
        if not expected:
            assert all(t.outcome == "dropped" for t in traces), (src, dst, traces)
            continue
        assert all(t.delivered for t in traces), (src, dst, [t for t in traces if not t.delivered])
        assert {t.switches for t in traces} == expected
        assert len(traces) == len(expected)  # each path exactly once: no duplicate buckets


@pytest.mark.parametrize("name", FABRICS)
def test_shortest_gives_each_pair_one_shortest_path(name):
    fabric = FABRICS[name]()
    net = network(fabric, "shortest")
    for src, dst in pairs(fabric):
        expected = oracle_paths(fabric, src, dst)
        traces = net.all_traces(src, dst)
        if not expected:
            assert [t.outcome for t in traces] == ["dropped"]
            continue
        assert len(traces) == 1 and traces[0].delivered
        assert traces[0].switches in expected


def test_fat_tree_path_counts():
    fabric = fat_tree(4)
    net = network(fabric, "ecmp")
    # h0,h1 share edge0_0; h2 is on edge0_1; h4 is in pod 1.
    assert len(net.all_traces("h0", "h1")) == 1
    assert len(net.all_traces("h0", "h2")) == 2
    assert len(net.all_traces("h0", "h4")) == 4


def test_ecmp_hash_spreads_flows_and_is_deterministic():
    fabric = fat_tree(4)
    net = network(fabric, "ecmp")
    used = {net.trace("h0", "h15", sport=40000 + i).switches for i in range(64)}
    assert len(used) == 4
    again = network(fabric, "ecmp")
    assert all(net.trace("h0", "h15", sport=p) == again.trace("h0", "h15", sport=p)
               for p in range(40000, 40032))


def test_shortest_spreads_destinations_over_cores():
    fabric = fat_tree(4)
    net = network(fabric, "shortest")
    cores = {s for dst in fabric.hosts[4:] for s in net.trace("h0", dst).switches if s.startswith("core")}
    assert len(cores) > 1


def test_routes_are_deterministic_and_survive_the_json_round_trip():
    fabric = rail_optimized(2, 4, 2)
    a = compute_routes(fabric, "ecmp")
    b = compute_routes(Fabric.from_dict(fabric.to_dict()), "ecmp")
    assert a == b


def test_equal_cost_paths_matches_networkx():
    fabric = fat_tree(6)
    for src, dst in [("h0", "h1"), ("h0", "h4"), ("h0", "h53")]:
        assert set(equal_cost_paths(fabric, src, dst)) == oracle_paths(fabric, src, dst)


def test_groups_are_shared_per_port_set():
    fabric = fat_tree(4)
    _, groups = compute_routes(fabric, "ecmp")
    per_switch = {}
    for g in groups:
        per_switch.setdefault(g.switch, []).append(g)
    assert len(per_switch["edge0_0"]) == 1  # every remote host leaves over the same two uplinks
    assert "core0" not in per_switch  # a core has one way down to each pod
    assert compute_routes(fabric, "shortest")[1] == []


def test_arp_goes_to_the_controller_at_the_first_switch():
    fabric = leaf_spine(2, 2, 2)
    net = network(fabric, "ecmp")
    [t] = net.send("h0", net.arp_request("h0", fabric.node("h3")["ip"]))
    assert t.outcome == "controller" and t.nodes == ("h0", "leaf0")


def test_unknown_traffic_is_dropped_not_flooded():
    fabric = leaf_spine(2, 2, 2)
    net = network(fabric, "ecmp")
    pkt = net.packet("h0", "h3")
    pkt["ipv4_dst"] = "10.9.9.9"
    [t] = net.send("h0", pkt)
    assert t.outcome == "dropped" and t.nodes == ("h0", "leaf0")


@pytest.mark.parametrize("policy", ["congestion-aware", "coschedule"])
def test_congestion_aware_policies_forward_like_ecmp_and_show_new_flows(policy):
    fabric = fat_tree(4)
    ecmp, net = network(fabric, "ecmp"), network(fabric, policy)
    for dst in fabric.hosts[1:]:
        traces = net.all_traces("h0", dst)
        # The controller gets a copy of the unplaced flow's packet, and the
        # packet still goes on over the ECMP paths.
        assert {t.outcome for t in traces} == {"controller", "delivered"}
        assert {t.switches for t in traces if t.delivered} == {t.switches for t in ecmp.all_traces("h0", dst)}
    # UDP and ARP are not flows the controller places.
    assert [t.outcome for t in net.all_traces("h0", "h5", proto=17)] == ["delivered"] * 4


def test_unknown_policy_is_a_one_line_error():
    with pytest.raises(InputError) as e:
        compute_routes(fat_tree(2), "ospf")
    assert "controller.routing" in str(e.value) and "\n" not in str(e.value)


def test_select_group_skips_a_dead_uplink():
    fabric = fat_tree(4)
    net = network(fabric, "ecmp")
    net.set_link("edge0_0", "agg0_0", up=False)
    for sport in range(40000, 40016):
        t = net.trace("h0", "h4", sport=sport)
        assert t.delivered and "agg0_0" not in t.switches


def test_fake_switch_refuses_what_ovs_refuses():
    fabric = single_switch(2)
    net = FakeNetwork(fabric)
    rule = FlowRule("s0", 100, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.2"}, (("group", 1),))
    with pytest.raises(FakeOFError):
        net.apply([rule])
    net.apply([GroupRule("s0", 1, "select", ((1, (("output", 2),)),)), rule])
    assert net.trace("h0", "h1").delivered
    net.apply([GroupDelete("s0", 1)])  # takes the flows that use it along
    assert net.trace("h0", "h1").outcome == "dropped"


def test_rules_reject_missing_prerequisites():
    with pytest.raises(RuleError):
        FlowRule("s0", 100, {"ipv4_dst": "10.0.0.1"}, (("output", 1),))
    with pytest.raises(RuleError):
        FlowRule("s0", 100, {"eth_type": 0x0800, "tcp_dst": 80}, (("output", 1),))
    with pytest.raises(RuleError):
        FlowRule("s0", 100, {}, (("flood",),))


def test_fake_network_detects_loops():
    fabric = fat_tree(4)
    net = network(fabric, "ecmp")
    ip = fabric.node("h4")["ip"]
    # edge0_0 -> agg0_0 -> edge0_1 -> agg0_1 -> edge0_0 -> ...
    hops = [("edge0_0", "agg0_0"), ("agg0_0", "edge0_1"), ("edge0_1", "agg0_1"), ("agg0_1", "edge0_0")]
    net.apply([FlowRule(a, 500, {"eth_type": 0x0800, "ipv4_dst": ip}, (("output", fabric.port(a, b)),))
               for a, b in hops])
    t = net.trace("h0", "h4")
    assert t.outcome == "loop" and t.nodes[-1] == "edge0_0"


FABRIC_SPECS = st.one_of(
    st.builds(lambda k: from_spec(f"fat-tree:k={k}"), st.sampled_from([2, 4, 6])),
    st.builds(leaf_spine, st.integers(1, 5), st.integers(1, 3), st.integers(1, 3)),
    st.builds(rail_optimized, st.integers(1, 4), st.integers(1, 4), st.integers(1, 3)),
    st.builds(single_switch, st.integers(2, 8)),
)


@settings(max_examples=60, deadline=None)
@given(fabric=FABRIC_SPECS, policy=st.sampled_from(["ecmp", "shortest"]), data=st.data())
def test_property_random_flows_take_a_shortest_path(fabric, policy, data):
    net = network(fabric, policy)
    src, dst = data.draw(st.lists(st.sampled_from(fabric.hosts), min_size=2, max_size=2, unique=True)
                         if len(fabric.hosts) > 1 else st.nothing())
    sport = data.draw(st.integers(1024, 65535))
    dport = data.draw(st.integers(1, 65535))
    proto = data.draw(st.sampled_from([6, 17]))
    t = net.trace(src, dst, proto=proto, sport=sport, dport=dport)
    expected = oracle_paths(fabric, src, dst)
    if expected:
        assert t.delivered and t.switches in expected
    else:
        assert t.outcome == "dropped"
