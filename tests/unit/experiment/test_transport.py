"""transport: engine-neutral parsing, each engine's table (models, ignores, refuses), the
emulator's mapping onto its testbed, and spraying (the policy, the flow engine's even split)."""
from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

from badinput import InputError
from controller.registry import BUILTINS, policy_class
from dtnet.cli import main
from emulator.testbed import shaping
from emulator.testbed import transport as emu
from emulator.testbed.datapath import netem_available
from emulator.testbed import lifecycle
from experiment import model
from experiment.transport import SUPPORT, check_transport
from flowsim import JobSpec, Net, Params, Simulation
from flowsim.routing import EcmpRouter, SprayRouter, path_weights
from flowsim.runner import check as flow_check
from flowsim.runner import run_experiment as flow_run
from topologies import leaf_spine
from traffic.trace import Op, Trace

BASE = {"name": "t", "topology": {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2,
                                  "link_gbps": 400},
        "scale": {"link": 2.5e-5, "bytes": 1e-3},
        "jobs": [{"name": "j0", "hosts": "all",
                  "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 1 << 26}}]}
HERE_CC = {"reno", "cubic", "bbr"}  # what this kernel offers (no dctcp)


def exp(transport=None, **top):
    data = copy.deepcopy(BASE)
    if transport is not None:
        data["transport"] = transport
    data.update(top)
    return model.parse(data, "t.yaml")


def refused(key, f, *a, **kw):
    with pytest.raises(InputError) as e:
        f(*a, **kw)
    assert e.value.key == key, str(e.value)
    return str(e.value)


# -- the section --------------------------------------------------------------------------
def test_no_section_sets_nothing_and_round_trips():
    e = exp()
    assert e.transport.given() == {} and "transport" not in model.to_dict(e)
    full = exp({"tcp": {"cc": "dctcp"}, "mtu_bytes": 4000, "switch_buffer_bytes": 1 << 22,
                "ecn": {"min_bytes": 100000, "max_bytes": 200000, "max_prob": 0.5},
                "latency_us": {"fabric": 2}})
    assert full.transport.latency_us.of("fabric") == 2.0 and full.transport.latency_us.host == 0.0
    assert model.parse(model.to_dict(full), "t.yaml") == full


@pytest.mark.parametrize("section,key", [
    ({"bogus": 1}, "transport.bogus"),
    ({"tcp": {"cc": "vegas"}}, "transport.tcp.cc"),
    ({"tcp": {"cc": "cubic", "x": 1}}, "transport.tcp.x"),
    ({"mtu_bytes": 100}, "transport.mtu_bytes"),
    ({"mtu_bytes": 70000}, "transport.mtu_bytes"),
    ({"switch_buffer_bytes": 0}, "transport.switch_buffer_bytes"),
    ({"ecn": {"max_prob": 0}}, "transport.ecn.max_prob"),
    ({"ecn": {"min_bytes": 10, "max_bytes": 5}}, "transport.ecn.max_bytes"),
    ({"switch_buffer_bytes": 1000, "ecn": {"min_bytes": 10, "max_bytes": 5000}}, "transport.ecn.max_bytes"),
    ({"tcp": {"cc": "dctcp"}}, "transport.ecn"),  # DCTCP without marks
    ({"latency_us": {"spine": 1}}, "transport.latency_us.spine"),
    ({"latency_us": {"host": -1}}, "transport.latency_us.host"),
    ({"tcp": {"ack_every_segments": 0}}, "transport.tcp.ack_every_segments"),
    ({"tcp": {"ack_every_segments": 65}}, "transport.tcp.ack_every_segments"),
    ({"tcp": {"tail_loss_probe": 1}}, "transport.tcp.tail_loss_probe"),
    ({"tcp": {"tail_loss_probe": "yes"}}, "transport.tcp.tail_loss_probe"),
    ({"tcp": {"loss_detection": "fack"}}, "transport.tcp.loss_detection"),
    ({"tcp": {"loss_detection": True}}, "transport.tcp.loss_detection"),
    ({"tcp": {"loss_detection": "rack", "tail_loss_probe": False}}, "transport.tcp.tail_loss_probe"),  # RACK-TLP
])
def test_bad_sections_are_one_line_errors(section, key):
    msg = refused(key, exp, section)
    assert "t.yaml" in msg and "\n" not in msg


def test_two_latencies_at_once_are_refused():
    data = copy.deepcopy(BASE)
    data["topology"]["latency_us"] = 3
    data["transport"] = {"latency_us": {"fabric": 2}}
    refused("transport.latency_us", model.parse, data, "t.yaml")


def test_fewer_acks_is_a_tcp_key_that_round_trips_and_only_the_packet_engine_models():
    e = exp({"tcp": {"cc": "cubic", "ack_every_segments": 7}})
    assert e.transport.given() == {"tcp.cc": "cubic", "tcp.ack_every_segments": 7}
    assert model.parse(model.to_dict(e), "t.yaml") == e
    assert check_transport(e, "packet") == []
    assert check_transport(e, "flow") == ["tcp.cc", "tcp.ack_every_segments"]
    assert "engine: packet" in refused("transport.tcp.ack_every_segments", check_transport, e, "emulate")


def test_the_tail_loss_probe_is_a_tcp_key_the_packet_engine_models_the_flow_engine_ignores():
    on, off = exp({"tcp": {"tail_loss_probe": True}}), exp({"tcp": {"tail_loss_probe": False}})
    assert on.transport.given() == {"tcp.tail_loss_probe": True}
    assert off.transport.given() == {"tcp.tail_loss_probe": False}  # false is said, not left out
    assert model.parse(model.to_dict(off), "t.yaml") == off
    assert check_transport(on, "packet") == check_transport(off, "packet") == []
    assert check_transport(on, "flow") == ["tcp.tail_loss_probe"]


def test_the_emulator_takes_a_tail_loss_probe_and_refuses_to_run_without_one():
    # Linux probes in every namespace (net.ipv4.tcp_early_retrans 3): true is what it does
    emu.check(exp({"tcp": {"tail_loss_probe": True}}), available=HERE_CC)
    msg = refused("transport.tcp.tail_loss_probe", emu.check, exp({"tcp": {"tail_loss_probe": False}}),
                  available=HERE_CC)
    assert "tcp_early_retrans" in msg and "engine: packet" in msg and "found False" in msg


def test_loss_detection_is_a_tcp_key_the_packet_engine_models_the_flow_engine_ignores():
    from packetsim.transport import settings
    rack, dupack = exp({"tcp": {"loss_detection": "rack"}}), exp({"tcp": {"loss_detection": "dupack"}})
    assert rack.transport.given() == {"tcp.loss_detection": "rack"}
    assert model.parse(model.to_dict(dupack), "t.yaml") == dupack
    assert check_transport(rack, "packet") == check_transport(dupack, "packet") == []
    assert check_transport(rack, "flow") == ["tcp.loss_detection"]
    # rack brings its probe (RACK-TLP); dupack and the default leave the probe as the file says
    assert (settings(rack).loss_detection, settings(rack).tail_loss_probe) == ("rack", True)
    assert (settings(dupack).loss_detection, settings(dupack).tail_loss_probe) == ("dupack", False)
    assert settings(exp()).loss_detection == "dupack"
    msg = refused("transport.tcp.tail_loss_probe", exp, {"tcp": {"loss_detection": "rack", "tail_loss_probe": False}})
    assert "RACK-TLP" in msg and "found False" in msg


def test_the_emulator_takes_rack_and_refuses_dupack():
    # Linux detects losses with RACK in every namespace (net.ipv4.tcp_recovery 1)
    emu.check(exp({"tcp": {"loss_detection": "rack"}}), available=HERE_CC)
    msg = refused("transport.tcp.loss_detection", emu.check, exp({"tcp": {"loss_detection": "dupack"}}),
                  available=HERE_CC)
    assert "tcp_recovery" in msg and "engine: packet" in msg and "found dupack" in msg


# -- the table ----------------------------------------------------------------------------
def test_each_engine_models_ignores_or_refuses_every_key():
    every = exp({"tcp": {"cc": "dctcp"}, "mtu_bytes": 4000, "switch_buffer_bytes": 1 << 24,
                 "ecn": {"min_bytes": 100000, "max_bytes": 100000}, "latency_us": {"fabric": 2}})
    assert check_transport(every, "packet") == []
    assert check_transport(every, "flow") == ["tcp.cc", "mtu_bytes", "switch_buffer_bytes", "ecn"]
    refused("transport.ecn", check_transport, every, "emulate")
    refused("transport", check_transport, every, "no-such-engine")
    assert all(set(t) == set(SUPPORT["packet"]) for t in SUPPORT.values())


def test_the_machine_check_refuses_what_this_machine_lacks():
    e = exp({"mtu_bytes": 4000})
    msg = refused("transport.mtu_bytes", check_transport, e, "emulate", lambda k, v: "no such frames here")
    assert "no such frames here" in msg


# -- the emulator ---------------------------------------------------------------------------
def test_emulator_maps_newreno_to_reno_and_refuses_what_the_kernel_lacks():
    e = exp({"tcp": {"cc": "newreno"}})
    assert "TCP newreno" in emu.check(e, available=HERE_CC)
    assert emu.testbed_settings(e)["tcp_cc"] == "reno"
    d = exp({"tcp": {"cc": "dctcp"}, "ecn": {"min_bytes": 100000, "max_bytes": 100000}})
    msg = refused("transport.tcp.cc", emu.check, d, available=HERE_CC)
    assert "bbr, cubic, reno" in msg
    assert "tcp_cc" not in emu.testbed_settings(exp())  # nothing set: the kernel's default stays


def test_emulator_refuses_ecn_spraying_and_latency_without_netem():
    refused("transport.ecn", emu.check, exp({"ecn": {"min_bytes": 1000, "max_bytes": 1000}}), available=HERE_CC)
    refused("controller.policy", emu.check, exp(controller={"policy": "spray"}), available=HERE_CC)
    lat = exp({"latency_us": {"host": 1, "fabric": 2}})
    refused("transport.latency_us", emu.check, lat, available=HERE_CC, netem=lambda: False)
    emu.check(lat, available=HERE_CC, netem=lambda: True)  # a kernel with netem takes it
    dilation = lat.scale.dilation
    assert emu.testbed_settings(lat)["kind_delay_us"] == {"host": 1 * dilation, "fabric": 2 * dilation,
                                                          "nvlink": 0.0}


def test_switch_buffer_scales_with_the_bytes_and_needs_two_frames():
    e = exp({"switch_buffer_bytes": 32 << 20})
    assert emu.switch_queue_bytes(e) == int((32 << 20) * 1e-3)
    assert "switch queues 33554 emulated bytes" in emu.check(e, available=HERE_CC)
    msg = refused("transport.switch_buffer_bytes", emu.check, exp({"switch_buffer_bytes": 1 << 20}),
                  available=HERE_CC)
    assert "at least 18000000 bytes" in msg
    # A smaller MTU lets a shallower buffer hold its two frames.
    emu.check(exp({"switch_buffer_bytes": 4 << 20, "mtu_bytes": 1500}), available=HERE_CC)


def test_switch_ports_get_the_buffer_and_hosts_keep_theirs(tmp_path):
    fab = leaf_spine(2, 2, 2)
    tb = lifecycle.Testbed(fab, str(tmp_path), scale_link=2.5e-5, switch_queue_bytes=30000,
                           kind_delay_us={"host": 10.0, "fabric": 20.0, "nvlink": 0.0})
    tb.tag, tb.datapath = "xq", "userspace"
    shapes = tb.plan_shaping()
    by_dev = {s.dev: s for s in shapes}
    host_out = by_dev[tb.intf("h0", "leaf0")]
    switch_down = by_dev[tb.intf("leaf0", "h0")]
    switch_up = by_dev[tb.intf("leaf0", "spine0")]
    assert host_out.limit_bytes is None and switch_down.limit_bytes == switch_up.limit_bytes == 30000
    assert host_out.delay_us == switch_down.delay_us == 10.0 and switch_up.delay_us == 20.0
    lines = shaping.htb_cmds("d", 10.0, 1000, 9000, limit_bytes=30000)
    assert sum("bfifo limit 30000" in ln for ln in lines) == 2
    with pytest.raises(ValueError):
        shaping.htb_cmds("d", 10.0, 1000, 9000, limit_bytes=17999)


# -- the flow engine ------------------------------------------------------------------------
def test_flow_engine_takes_latency_per_link_kind():
    fab = leaf_spine(2, 2, 2, link_gbps=8.0)
    tr = Trace(nranks=4, groups={}, ops={0: [Op("x", "send", (), size_bytes=10**6, peer=2)], 1: [],
                                       2: [Op("x", "recv", (), size_bytes=10**6, peer=0)], 3: []})
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, tr)], EcmpRouter(0),
                     Params(link_latency_s=(1e-6, 1e-5, 0.0)))
    res = sim.run()
    assert res.complete
    # h0 -> leaf0 -> spine -> leaf1 -> h2: two host links and two fabric links.
    assert sim.C_lat[0] == pytest.approx(2e-6 + 2e-5)
    assert res.assumptions()["link_latency_s"] == {"host": 1e-6, "fabric": 1e-5, "nvlink": 0.0}


def test_flow_engine_says_what_it_ignores(tmp_path):
    e = exp({"tcp": {"cc": "bbr"}, "latency_us": {"fabric": 2}}, engine="flow")
    assert "ignores transport.tcp.cc" in flow_check(e) and "fabric 2 us" in flow_check(e)
    s = flow_run(e, str(tmp_path), log=lambda *_: None)
    t = s["model"]["transport"]
    assert t["models"] == {"latency_us": {"host": 0.0, "fabric": 2.0, "nvlink": 0.0}}
    assert t["ignores"] == {"tcp.cc": "bbr", "tcp.ack_every_segments": None, "tcp.tail_loss_probe": None,
                            "tcp.loss_detection": None, "mtu_bytes": None, "switch_buffer_bytes": None, "ecn": None}
    assert "transport.tcp.cc" in s["model"]["ignored"]


# -- spraying -------------------------------------------------------------------------------
def test_spray_is_a_builtin_policy_that_says_it_sprays():
    assert "spray" in BUILTINS
    assert policy_class("spray").sprays and not policy_class("ecmp").sprays


def two_sends(n_bytes=10**9):
    return Trace(nranks=4, groups={}, ops={0: [Op("a", "send", (), size_bytes=n_bytes, peer=2)],
                                           1: [Op("b", "send", (), size_bytes=n_bytes, peer=3)],
                                           2: [Op("a", "recv", (), size_bytes=n_bytes, peer=0)],
                                           3: [Op("b", "recv", (), size_bytes=n_bytes, peer=1)]})


def test_an_even_split_over_two_paths_halves_each_paths_load():
    fab = leaf_spine(2, 2, 2, link_gbps=8.0)  # 1e9 bytes/s a link
    net = Net.from_fabric(fab)
    one = Trace(nranks=4, groups={}, ops={0: [Op("a", "send", (), size_bytes=10**9, peer=2)], 1: [],
                                        2: [Op("a", "recv", (), size_bytes=10**9, peer=0)], 3: []})
    sim = Simulation(net, [JobSpec("j", fab.hosts, one)], SprayRouter(), Params(hop_latency_s=1e-6))
    res = sim.run()
    assert res.complete
    up = [res.link_bytes[net.link("leaf0", f"spine{i}")] for i in range(2)]
    assert up == pytest.approx([0.5e9, 0.5e9])
    assert res.link_bytes[net.link("h0", "leaf0")] == pytest.approx(1e9)
    assert sim.C_lat[0] == pytest.approx(4e-6)  # one path's four hops, not both paths' eight
    assert list(path_weights(sim.C_path[0])) == [0.5] * 8


@pytest.mark.parametrize("seed", range(4))
def test_spraying_never_collides_where_ecmp_may(seed):
    """Two flows between the leaves: ECMP takes 2 s when its hash puts them on one spine;
    sprayed, each flow is half on each spine and both end at 1 s."""
    fab = leaf_spine(2, 2, 2, link_gbps=8.0)
    ends = {}
    for name, router in (("ecmp", EcmpRouter(seed)), ("spray", SprayRouter())):
        sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, two_sends())], router, Params())
        res = sim.run()
        ends[name] = max(e["end"] for e in res.op_events())
    assert ends["spray"] == pytest.approx(1.0)
    assert ends["ecmp"] in (pytest.approx(1.0), pytest.approx(2.0))


def test_the_spray_policy_runs_on_the_flow_engine_at_full_bisection(tmp_path):
    e = exp(engine="flow", controller={"policy": "spray"},
            jobs=[{"name": "j0", "hosts": "all", "workload": {"pattern": "stride", "stride": 2,
                                                               "size_bytes": 1 << 30}}])
    s = flow_run(e, str(tmp_path), log=lambda *_: None)
    assert s["model"]["routing"]["base"].startswith("spray")
    assert s["traffic"]["normalized_throughput"] == pytest.approx(1.0, rel=1e-3)
    assert np.isfinite(s["jobs"][0]["iteration_time_s"]["mean"])


# -- the published-result files ---------------------------------------------------------------
EXPERIMENTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments")
PUBLISHED = {
    # file: (a small point for the flow engine, what the emulator refuses of its sweep)
    "incast": (["jobs.0.workload.iterations=2"], "transport.switch_buffer_bytes"),
    "dctcp-vs-tcp": (["jobs.0.workload.size_bytes=12500000"], "transport.switch_buffer_bytes"),
    "latency-ring": (["jobs.0.workload.size_bytes=1048576", "jobs.0.workload.iterations=1",
                      "transport.latency_us.fabric=50"], "transport.latency_us"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_result_files_run_on_the_flow_engine_and_the_emulator_refuses_them(tmp_path, name, capsys):
    path = f"{EXPERIMENTS}/{name}.yaml"
    small, refused_key = PUBLISHED[name]
    sets = [a for s in ["sweep={}", *small] for a in ("--set", s)]
    assert main(["run", path, "--out", str(tmp_path / "run"), *sets]) == 0
    s = json.load(open(tmp_path / "run" / "summary.json"))
    assert s["status"] == "complete" and s["engine"] == "flow"
    capsys.readouterr()
    if refused_key == "transport.latency_us" and netem_available():
        pytest.skip("this kernel has netem: the emulator takes latency")
    assert main(["check", path, "--engine", "emulate"]) == 2
    assert f"{refused_key}: expected" in capsys.readouterr().err


def test_emulator_refuses_frames_larger_than_measured_to_pass():
    emu.check(exp({"mtu_bytes": emu.MAX_MTU_MEASURED, "switch_buffer_bytes": 1 << 30}), available=HERE_CC)
    refused("transport.mtu_bytes", emu.check, exp({"mtu_bytes": emu.MAX_MTU_MEASURED + 1}), available=HERE_CC)
    refused("transport.mtu_bytes", emu.check, exp({"mtu_bytes": 4000}, testbed={"datapath": "afxdp"}),
            available=HERE_CC)


def test_spraying_keeps_nvlink_peers_on_nvlink_and_splits_the_rest():
    from topologies import rail_optimized
    fab = rail_optimized(2, 4, 2)  # 2 servers of 4 GPUs, 4 rails, 2 spines
    net = Net.from_fabric(fab)
    # h0 to a peer in its server (NVLink), and to h5: another rail of the other server, over either spine.
    src, dst = np.array([0, 0]), np.array([1, 5])
    indptr, links = SprayRouter().route(net, src, dst, np.zeros(2, np.uint64))
    local, remote = links[indptr[0]:indptr[1]], links[indptr[1]:indptr[2]]
    assert [net.link_kind[x] for x in local] == [2, 2] and list(path_weights(local)) == [1.0, 1.0]
    spines = {net.node_path(remote[i:i + 4])[2] for i in (0, 4)}
    assert len(remote) == 8 and len(spines) == 2 and list(path_weights(remote)) == [0.5] * 8


def test_a_sprayed_flow_over_a_dead_uplink_takes_the_paths_left_or_none():
    fab = leaf_spine(2, 2, 2, link_gbps=8.0)
    net = Net.from_fabric(fab)
    router = SprayRouter()
    ip, lk = router.route(net, np.array([0]), np.array([2]), np.zeros(1, np.uint64))
    assert len(lk) == 8  # both spines
    net.set_cable("leaf0", "spine0", False)
    ip, lk = router.route(net, np.array([0]), np.array([2]), np.zeros(1, np.uint64))
    assert net.node_path(lk)[2] == "spine1" and list(path_weights(lk)) == [1.0] * 4
    net.set_cable("leaf0", "spine1", False)
    ip, lk = router.route(net, np.array([0, 0]), np.array([2, 1]), np.zeros(2, np.uint64))
    assert list(ip) == [0, 0, 2]  # the first is cut off; the one within its leaf still goes


# -- the emulator's frames -------------------------------------------------------------------
@pytest.mark.parametrize("mbps, mtu", [(2.5, 9000), (10, 9000), (20, 18000), (40, 36000), (60, 54000),
                                       (72.2, 64980), (80, 65000), (400, 65000)])
def test_emulator_frames_take_what_a_9000_byte_frame_takes_at_10_mbps(mbps, mtu):
    """A frame lasts at most 7.2 ms on the slowest switch link, within 9000 and 65000 bytes."""
    from experiment.transport import emulator_mtu_bytes
    assert emulator_mtu_bytes(None, mbps) == mtu
    assert emulator_mtu_bytes(None, mbps, afxdp=True) == 3000
    assert emulator_mtu_bytes(1500, mbps) == 1500  # the file's MTU is the file's


def test_emulator_frames_fit_twice_in_a_set_switch_queue():
    from experiment.transport import emulator_mtu_bytes
    assert emulator_mtu_bytes(None, 80, queue_bytes=40000) == 20000
    assert emulator_mtu_bytes(None, 80, queue_bytes=10000) == 9000  # never below 9000: check() refuses that queue
    assert emulator_mtu_bytes(None, 80, queue_bytes=1 << 20) == 65000


def test_emulator_sizes_frames_to_the_switch_links_not_nvlink():
    """The run's MTU follows its slowest switch link; NVLink bridges, 9x faster, do not count."""
    from packetsim import emulated
    rail = {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 1, "link_gbps": 400,
            "nvlink_gbps": 3600}
    e = exp(topology=rail, scale={"link": 1e-4, "bytes": 4e-3})  # 40 Mb/s network, 360 Mb/s NVLink
    assert emu.mtu_of(e) == 36000
    assert "MTU 36000 (sized to the 40 Mb/s switch links" in emu.check(e, available=HERE_CC)
    assert emu.testbed_settings(e)["mtu"] == 36000
    assert emulated.transport(e).mtu_bytes == 36000  # the packet engine in emulated units runs the same frames
    pinned = exp({"mtu_bytes": 9000}, topology=rail, scale={"link": 1e-4, "bytes": 4e-3})
    assert emu.mtu_of(pinned) == 9000 and "MTU 9000," in emu.check(pinned, available=HERE_CC)
