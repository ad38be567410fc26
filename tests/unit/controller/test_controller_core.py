"""The controller state machine, driven by hand against the fake network."""
import itertools

import pytest

from controller.core import FabricController
from controller.fakeof import FakeNetwork
from controller.run import check_inputs, parse_args, ryu_argv
from controller.rules import FlowRule, GroupRule
from controller.testing import connect_all
from topologies import fat_tree, rail_optimized


def test_connect_plans_route_every_pair_and_mark_ready():
    fabric = rail_optimized(2, 4, 2)
    ctl = FabricController(fabric, "ecmp")
    net = FakeNetwork(fabric)
    assert ctl.status()["ready"] is False
    connect_all(ctl, net)
    st = ctl.status()
    assert st["ready"] and st["switches_expected"] == 6 and len(st["switches_ready"]) == 6
    for a, b in itertools.permutations(fabric.hosts, 2):
        assert all(t.delivered for t in net.all_traces(a, b))


def test_reconnect_wipes_stale_state():
    fabric = fat_tree(4)
    ctl = FabricController(fabric, "ecmp")
    net = FakeNetwork(fabric)
    edge = ctl.switches["edge0_0"]
    # Leftovers of an earlier controller: a black-holing flow and a stray group.
    ip = fabric.node("h15")["ip"]
    net.apply([GroupRule("edge0_0", 77, "select", ((1, (("output", 1),)),)),
               FlowRule("edge0_0", 100, {"eth_type": 0x0800, "ipv4_dst": ip}, ())])
    connect_all(ctl, net)
    assert net.trace("h0", "h15").delivered
    assert 77 not in net.switches["edge0_0"].groups
    # A second connect of one switch (switch restart) leaves the network working.
    for stage in ctl.switch_connected(edge.dpid, 5.0):
        net.apply(stage)
    assert net.trace("h0", "h15").delivered


def test_groups_come_before_the_flows_that_use_them():
    fabric = fat_tree(4)
    ctl = FabricController(fabric, "ecmp")
    plan = ctl.switch_connected(ctl.switches["edge0_0"].dpid, 0.0)
    group_stage = next(i for i, s in enumerate(plan) if any(isinstance(op, GroupRule) for op in s))
    flow_stage = next(i for i, s in enumerate(plan) if any(isinstance(op, FlowRule) for op in s))
    assert group_stage < flow_stage


def test_readiness_follows_errors_and_disconnects():
    fabric = fat_tree(2)
    ctl = FabricController(fabric, "shortest")
    connect_all(ctl, FakeNetwork(fabric))
    assert ctl.status()["ready"]
    core = ctl.switches["core0"].dpid
    ctl.switch_disconnected(core, 3.0)
    st = ctl.status()
    assert not st["ready"] and "core0" not in st["switches_connected"]
    ctl.switch_connected(core, 4.0)
    ctl.switch_error(core, 4.1)
    ctl.install_done(core, 4.2)
    assert "core0" not in ctl.status()["switches_ready"]


def test_unknown_datapath_gets_nothing():
    ctl = FabricController(fat_tree(2), "ecmp")
    assert ctl.switch_connected(999, 0.0) == []
    assert ctl.switch_name(999) is None


def test_arp_answers_fabric_hosts_only():
    fabric = rail_optimized(2, 2, 1)
    ctl = FabricController(fabric, "ecmp")
    rail0 = ctl.switches["rail0"].dpid
    h0, h3 = fabric.node("h0"), fabric.node("h3")
    ans = ctl.arp_request(rail0, 1, h0["ip"], h0["mac"], h3["ip"])
    assert ans.target_mac == h3["mac"] and ans.port == 1 and ans.switch == "rail0"
    # NVLink addresses live on the kernel bridge, never in the fabric.
    assert ctl.arp_request(rail0, 1, h0["ip"], h0["mac"], h3["nvlink_ip"]) is None
    assert ctl.arp_request(rail0, 1, h0["ip"], h0["mac"], "192.168.1.1") is None
    assert ctl.status()["counters"]["arp_replies"] == 1


def test_run_builds_ryu_arguments():
    args = parse_args(["--fabric", "f.json", "--ofp-port", "16653", "--rest-port", "18080", "--log-file", "x"])
    argv = ryu_argv(args)
    assert argv[-1] == "controller.ryu_app"
    assert argv[argv.index("--ofp-tcp-listen-port") + 1] == "16653"
    assert argv[argv.index("--wsapi-port") + 1] == "18080"
    assert argv[argv.index("--ofp-listen-host") + 1] == "127.0.0.1"


def test_run_rejects_bad_inputs_in_one_line(tmp_path):
    good = tmp_path / "f.json"
    fat_tree(2).dump(str(good))
    check_inputs(str(good), "ecmp")
    for path, routing in [(str(good), "ospf"), (str(tmp_path / "missing.json"), "ecmp")]:
        with pytest.raises(SystemExit) as e:
            check_inputs(path, routing)
        assert "\n" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        check_inputs(str(good), "ecmp", poll_s=0)
    assert "poll_s" in str(e.value)
    with pytest.raises(SystemExit):
        parse_args(["--fabric", "f.json", "--ofp-port", "70000"])
