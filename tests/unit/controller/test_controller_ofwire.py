"""The adapter's OpenFlow encoding, under test: rule operations go through Ryu's own OFP
classes, out to bytes and back in as a switch reads them, and the fake network applies
what comes out. Packets must then go exactly where they go without the wire."""
import itertools

import pytest

from controller import ofwire
from controller.core import FabricController
from controller.fakeof import FakeNetwork
from controller.rules import (COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, GROUP_ALL, FlowDelete, FlowRule, GroupDelete,
                              GroupRule, RuleError)
from controller.testing import Sim, connect_all, delivered_pairs
from topologies import fat_tree, leaf_spine, rail_optimized

OPS = [
    FlowRule("s", 300, {"eth_type": 0x0800, "ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.2", "ip_proto": 6,
                        "tcp_src": 40000, "tcp_dst": 5000},
             (("set_queue", 2), ("output", 3)), cookie=COOKIE_FLOW_BASE + 7, idle_timeout_s=30, notify_removed=True),
    FlowRule("s", 150, {"in_port": 1, "eth_type": 0x0800, "ip_proto": 6}, (("controller",),), cookie=3,
             goto_table=1),
    FlowRule("s", 100, {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}, (("group", 4),), table=1, hard_timeout_s=5),
    FlowRule("s", 0, {}, (), table=1),
    FlowDelete("s", {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}, 100, strict=True, table=1),
    FlowDelete("s", cookie=COOKIE_FLOW_BASE, cookie_mask=COOKIE_FLOW_MASK),
    GroupRule("s", 4, "select", ((1, (("output", 2),)), (3, (("output", 5),)))),
    GroupRule("s", 5, "fast_failover", ((1, (("output", 1),)),)),
    GroupDelete("s", 4),
    GroupDelete("s", GROUP_ALL),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: type(op).__name__)
def test_every_operation_survives_encode_bytes_parse_decode(op):
    assert ofwire.through_the_wire([op]) == [op]


def test_a_group_rule_for_a_group_the_switch_holds_is_a_modify():
    dp = ofwire.datapath()
    held = {4}
    assert ofwire.to_ofp(dp, OPS[6], held).command == dp.ofproto.OFPGC_MODIFY
    assert ofwire.to_ofp(dp, GroupRule("s", 9, "select", ((1, (("output", 1),)),)), held).command == \
        dp.ofproto.OFPGC_ADD and held == {4, 9}


def test_a_bucket_that_does_not_watch_its_port_is_refused():
    """The fake network lets a select bucket die with its link because the adapter
    sets watch_port; a message without it would not do that on a switch."""
    dp = ofwire.datapath()
    msg = ofwire.to_ofp(dp, OPS[6])
    msg.buckets[0].watch_port = dp.ofproto.OFPP_ANY
    msg.serialize()
    with pytest.raises(RuleError, match="watches"):
        ofwire.from_ofp("s", dp, ofwire.parse_bytes(dp, bytes(msg.buf)))


@pytest.mark.parametrize("policy", ["shortest", "ecmp", "congestion-aware", "coschedule"])
@pytest.mark.parametrize("fabric", [fat_tree(4), leaf_spine(3, 2, 2), rail_optimized(2, 4, 2)],
                         ids=["fat-tree", "leaf-spine", "rail"])
def test_switches_fed_through_the_wire_hold_what_the_policy_means(policy, fabric):
    direct, wired = FakeNetwork(fabric), FakeNetwork(fabric)
    connect_all(FabricController(fabric, policy), direct)
    connect_all(FabricController(fabric, policy), wired, wire=True)
    for name in direct.switches:
        assert wired.switches[name].flows == direct.switches[name].flows
        assert wired.switches[name].groups == direct.switches[name].groups
    assert all(delivered_pairs(wired).values())
    for src, dst in itertools.permutations(fabric.hosts[:6], 2):
        assert wired.trace(src, dst, sport=4242) == direct.trace(src, dst, sport=4242)


def test_congestion_aware_moves_through_the_wire():
    """Per-flow entries, make-before-break moves and deletions, all as OFP messages."""
    sim = Sim(fat_tree(4), "congestion-aware", wire=True, hold_s=0.0)
    keys = [sim.start(f"h{i}", f"h{(i + 8) % 16}", 400, sport=1000 + i) for i in range(16)]
    for _ in range(4):
        sim.step()
    assert max(sim.link_flows(fabric_only=True).values()) == 1
    assert all(sim.path(k).delivered for k in keys)
    sim.set_link("agg0_0", "core0", up=False)
    assert all(sim.path(k).delivered and ("agg0_0", "core0") not in sim.path(k).links for k in keys)


def test_an_equal_select_group_goes_out_as_hash_slots_laid_out_per_switch_and_comes_back_as_made():
    """OVS hashes a flow alike at every switch and maps the hash alike in every group of as
    many equal buckets, so ECMP would take bucket b at every tier. The adapter sends HASH_SLOTS
    balanced copies in an order of the switch's own; the read-back is the group as made."""
    dp = ofwire.datapath()
    buckets = tuple((1, (("output", p),)) for p in (3, 4))
    layouts = {}
    for sw in ("edge0_0", "agg0_0", "agg0_1", "agg1_0"):
        op = GroupRule(sw, 7, "select", buckets)
        msg = ofwire.to_ofp(dp, op)
        assert len(msg.buckets) == ofwire.HASH_SLOTS
        ports = tuple(b.actions[0].port for b in msg.buckets)
        assert sorted(ports.count(p) for p in (3, 4)) == [32, 32]
        assert all(b.watch_port == b.actions[0].port for b in msg.buckets)
        layouts[sw] = ports
        assert ofwire.through_the_wire([op]) == [op]
    assert len(set(layouts.values())) == 4
    # Two switches' choices for the same hash slot: independent, not the same bucket every time.
    agree = sum(a == b for a, b in zip(layouts["edge0_0"], layouts["agg0_0"]))
    assert 16 <= agree <= 48, agree
    three = GroupRule("s", 1, "select", tuple((2, (("output", p),)) for p in (1, 2, 3)))
    counts = [tuple(b.actions[0].port for b in ofwire.to_ofp(dp, three).buckets).count(p) for p in (1, 2, 3)]
    assert sorted(counts) == [21, 21, 22] and ofwire.through_the_wire([three]) == [three]


def test_unequal_or_single_or_non_select_groups_go_out_as_made():
    dp = ofwire.datapath()
    for op in (OPS[6], GroupRule("s", 2, "select", ((1, (("output", 1),)),)), OPS[7],
               GroupRule("s", 3, "all", ((1, (("output", 1),)), (1, (("output", 2),))))):
        assert len(ofwire.to_ofp(dp, op).buckets) == len(op.buckets)
