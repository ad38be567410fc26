"""A controller restart in the fake network: the new controller reads back what
each switch holds and resynchronizes it make-before-break, so that no packet
meets a gap or a loop at any step, and nothing that holds is sent again."""
import itertools

from controller.core import FabricController
from controller.fakeof import LOOP, FakeNetwork
from controller.flows import FlowKey
from controller.rules import COOKIE_FLOW_BASE, PRIORITY_FLOW, PRIORITY_ROUTE, ETH_IPV4, FlowRule, GroupRule
from topologies import fat_tree

SOURCES = ("h0", "h5", "h10", "h15")  # one per pod: every path kind of a k=4 fat-tree


def held(net, switch):
    fs = net.switches[switch]
    return list(fs.flows.values()), list(fs.groups.values())


def outcome(net) -> dict:
    """(src, dst) -> True when every path the groups allow delivers; loops fail the test."""
    out = {}
    for src, dst in itertools.permutations(net.fabric.hosts, 2):
        if src not in SOURCES:
            continue
        traces = [t for t in net.all_traces(src, dst) if t.outcome != "controller"]
        assert not any(t.outcome == LOOP for t in traces), traces
        out[src, dst] = bool(traces) and all(t.delivered for t in traces)
    return out


def connect(ctl, net, held_state=False, now=0.0, check=None):
    """Every switch (re)connects in dpid order; with check, after every single operation."""
    for name, st in sorted(ctl.switches.items(), key=lambda kv: kv[1].dpid):
        plan = ctl.switch_connected(st.dpid, now, held(net, name) if held_state else None)
        for stage in plan:
            for op in stage:
                net.apply([op])
                if check:
                    check()
        ctl.install_done(st.dpid, now)


def restart(fabric, net, routing="ecmp", down=(), check=None):
    """A new controller process: it learns the links that died meanwhile from the
    switches' port states (as the adapter feeds them), then resynchronizes."""
    ctl = FabricController(fabric, routing)
    for name, st in sorted(ctl.switches.items(), key=lambda kv: kv[1].dpid):
        for a, b in down:
            if name in (a, b):
                plan = ctl.port_status(st.dpid, fabric.port(name, b if name == a else a), False, 10.0)
                for stage in plan:
                    net.apply(stage)
        plan = ctl.switch_connected(st.dpid, 10.0, held(net, name))
        for stage in plan:
            for op in stage:
                net.apply([op])
                if check:
                    check()
        ctl.install_done(st.dpid, 10.0)
    return ctl


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
    assert all(outcome(net).values())
    assert ctl.status()["ready"]


def test_restart_after_a_link_died_unwatched_never_loses_a_delivered_pair():
    fabric = fat_tree(4)
    net = FakeNetwork(fabric)
    connect(FabricController(fabric, "ecmp"), net)
    net.set_link("agg0_0", "core0", up=False)  # while no controller was there
    seen = [outcome(net)]

    def check():
        now = outcome(net)
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
