"""A controller restart in the fake network: the new controller reads back what
each switch holds and resynchronizes it make-before-break, so that no packet
meets a gap or a loop at any step, and nothing that holds is sent again."""

from controller.core import FabricController
from controller.fakeof import FakeNetwork
from controller.flows import FlowKey
from controller.rules import COOKIE_FLOW_BASE, PRIORITY_FLOW, PRIORITY_ROUTE, ETH_IPV4, FlowRule, GroupRule
from controller.testing import connect_all, delivered_pairs, held, restart
from topologies import fat_tree

SOURCES = ("h0", "h5", "h10", "h15")  # one per pod: every path kind of a k=4 fat-tree


def connect(ctl, net, held_state=False, now=0.0, check=None):
    """Every switch (re)connects in dpid order; with check, after every single operation."""
    connect_all(ctl, net, now, held_state=held_state, check=check)


def test_restart_with_nothing_changed_sends_nothing():
    fabric = fat_tree(4)
    net = FakeNetwork(fabric)
    connect(FabricController(fabric, "ecmp"), net)
    before = {s: dict(fs.flows) for s, fs in net.switches.items()}
    ctl = restart(fabric, net)
    c = ctl.status()["counters"]
    assert c["resyncs"] == 20 and c["resync_entries_sent"] == 0 and c["resync_entries_deleted"] == 0
    assert c["resync_entries_kept"] == sum(len(f) for f in before.values()) + \
        sum(len(fs.groups) for fs in net.switches.values())
    assert {s: dict(fs.flows) for s, fs in net.switches.items()} == before
    assert all(delivered_pairs(net, SOURCES).values())
    assert ctl.status()["ready"]


def test_restart_after_a_link_died_unwatched_never_loses_a_delivered_pair():
    fabric = fat_tree(4)
    net = FakeNetwork(fabric)
    connect(FabricController(fabric, "ecmp"), net)
    net.set_link("agg0_0", "core0", up=False)  # while no controller was there
    seen = [delivered_pairs(net, SOURCES)]

    def check():
        now = delivered_pairs(net, SOURCES)
        lost = [p for p, ok in seen[-1].items() if ok and not now[p]]
        assert not lost, lost[:5]
        seen.append(now)

    ctl = restart(fabric, net, down=[("agg0_0", "core0")], check=check)
    assert not all(seen[0].values()), "the dead link cut nothing: the test proves nothing"
    assert all(seen[-1].values())
    assert ctl.status()["counters"]["resync_entries_sent"] > 0
    assert ctl.down == {frozenset(("agg0_0", "core0"))}


def test_stale_entries_go_last_and_group_ids_are_kept():
    fabric = fat_tree(4)
    net = FakeNetwork(fabric)
    connect(FabricController(fabric, "ecmp"), net)
    gids = dict(net.switches["edge0_0"].groups)
    ip = fabric.node("h15")["ip"]
    # Leftovers: a stray group, a route turned into a black hole, an unknown placement.
    net.apply([GroupRule("edge0_0", 77, "select", ((1, (("output", 1),)),)),
               FlowRule("edge0_0", PRIORITY_ROUTE, {"eth_type": ETH_IPV4, "ipv4_dst": ip}, ()),
               FlowRule("edge0_0", PRIORITY_FLOW, {"eth_type": ETH_IPV4, "ipv4_dst": ip, "ipv4_src": "10.0.0.9"},
                        (("output", 3),), cookie=COOKIE_FLOW_BASE + 41)])
    ctl = FabricController(fabric, "congestion-aware")
    plan = ctl.switch_connected(fabric.node("edge0_0")["dpid"], 1.0, held(net, "edge0_0"))
    kinds = [{type(op).__name__ for op in stage} for stage in plan]
    assert kinds[-2:] == [{"FlowDelete"}, {"GroupDelete"}]  # deletions after every install
    assert [op.group_id for op in plan[-1]] == [77]
    for stage in plan:
        net.apply(stage)
    assert dict(net.switches["edge0_0"].groups) == gids
    # New placements are numbered above the held ones: no cookie is shared with a stale entry.
    key = FlowKey(fabric.node("h0")["ip"], ip, 6, 1, 2)
    ctl.packet_in_flow(fabric.node("edge0_0")["dpid"], 1, key, 2.0)
    assert ctl.sched.flows[key].cookie > COOKIE_FLOW_BASE + 41


def test_a_stale_entry_removed_does_not_forget_a_live_flow():
    fabric = fat_tree(4)
    ctl = FabricController(fabric, "congestion-aware")
    connect(ctl, FakeNetwork(fabric))
    key = FlowKey(fabric.node("h0")["ip"], fabric.node("h15")["ip"], 6, 1, 2)
    ctl.packet_in_flow(fabric.node("edge0_0")["dpid"], 1, key, 1.0)
    cookie = ctl.sched.flows[key].cookie
    other = dict(key.match(), tcp_src=9)
    assert ctl.flow_removed(fabric.node("edge0_0")["dpid"], cookie, 2.0, other) == []
    assert key in ctl.sched.flows
    ctl.flow_removed(fabric.node("edge0_0")["dpid"], cookie, 3.0, key.match())
    assert key not in ctl.sched.flows
