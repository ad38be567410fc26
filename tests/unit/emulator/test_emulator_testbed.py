"""Testbed decisions that need no root: datapath choice and where each link is shaped."""
import os

import pytest

from emulator.testbed import lifecycle
from emulator.testbed.datapath import detect_datapath, parse_ovs_send_buffer
from emulator.testbed.lifecycle import LinkShape, Testbed
from emulator.testbed.process import TestbedError
from topologies import fat_tree, rail_optimized


def test_auto_prefers_kernel_then_system_ports_and_afxdp_only_on_request(monkeypatch):
    monkeypatch.setattr("emulator.testbed.datapath.kernel_datapath_available", lambda: False)
    assert detect_datapath("auto", {"system", "afxdp-nonpmd"}) == "userspace"
    assert detect_datapath("afxdp", {"system", "afxdp-nonpmd"}) == "afxdp"
    assert detect_datapath("userspace", {"afxdp-nonpmd"}) == "userspace"
    with pytest.raises(TestbedError, match="afxdp-nonpmd"):
        detect_datapath("afxdp", {"system"})
    monkeypatch.setattr("emulator.testbed.datapath.kernel_datapath_available", lambda: True)
    assert detect_datapath("auto", {"afxdp-nonpmd"}) == "kernel"


def planned(fabric, datapath, tmp_path):
    tb = Testbed(fabric, str(tmp_path), scale_link=2.5e-5, datapath=datapath)
    tb.tag, tb.datapath, tb.link_ns = "xq", datapath, "xqlinks"
    if datapath == "afxdp":
        for i, (a, b, _) in enumerate(fabric.links()):
            if tb._of_switch(a) and tb._of_switch(b):
                tb.ns_ends[a, b], tb.ns_ends[b, a] = f"l{i}a", f"l{i}b"
    return tb, tb.plan_shaping()


@pytest.mark.parametrize("datapath", ["userspace", "afxdp"])
def test_every_link_direction_is_shaped_exactly_once(tmp_path, datapath):
    fabric = rail_optimized(2, 4, 2)  # host links, NVLink bridges and switch links
    tb, shapes = planned(fabric, datapath, tmp_path)
    assert len(shapes) == 2 * len(fabric.links())
    where = {(s.dev, s.host, s.netns, s.ingress) for s in shapes}
    assert len(where) == len(shapes), "two directions shaped at the same place"


def test_afxdp_never_relies_on_an_ovs_ports_egress_qdisc(tmp_path):
    fabric = fat_tree(4)
    tb, shapes = planned(fabric, "afxdp", tmp_path)
    of_ports = {tb.intf(s, n) for s in fabric.switches for n in fabric.graph.neighbors(s) if tb._of_switch(s)}
    assert not [s for s in shapes if s.dev in of_ports and not s.ingress], "qdisc on an AF_XDP port does nothing"
    # Switch-to-host traffic is shaped as it enters the host, switch links in the link namespace.
    h0_in = [s for s in shapes if s.host == "h0" and s.ingress]
    assert h0_in == [LinkShape(tb.intf("h0", "edge0_0"), 10.0, "h0", ingress=True)]
    assert sum(s.netns == "xqlinks" for s in shapes) == 2 * 32  # k=4: 32 switch links, both ways
    _, sys_shapes = planned(fabric, "userspace", tmp_path)
    assert not [s for s in sys_shapes if s.ingress or s.netns]


def test_the_switchs_shared_send_buffer_is_read_from_ss():
    text = ('p_raw UNCONN 0 0 [3]:xa-eth1 * users:(("ovs-vswitchd",pid=9,fd=70)) '
            "skmem:(r0,rb212992,t0,tb4194304,f0,w0,o176,bl0,d0)\n"
            'p_raw UNCONN 0 0 [0]:* * users:(("ovs-vswitchd",pid=9,fd=64)) '
            "skmem:(r0,rb212992,t196800,tb212992,f0,w0,o0,bl0,d0)\n")
    assert parse_ovs_send_buffer(text) == 212992
    assert parse_ovs_send_buffer(text.splitlines()[0]) is None


def test_a_controller_that_loses_its_port_race_is_started_again_on_new_ports(tmp_path, monkeypatch):
    """Another run can take a port between free_ports() and the controller's bind:
    the testbed must notice (the controller exits) and not talk to that run's controller."""
    tb = Testbed(fat_tree(4), str(tmp_path), scale_link=2.5e-5, ready_timeout_s=5)
    ports = iter(range(6001, 6100))
    monkeypatch.setattr(lifecycle, "free_ports", lambda n: [next(ports) for _ in range(n)])
    started = []

    class Proc:
        def __init__(self, dies):
            self.pid, self.returncode, self.dies = 4242, None, dies

        def poll(self):
            self.returncode = 1 if self.dies else None
            return self.returncode

    def start(fabric_path, ofp_port, restart=False):
        started.append((ofp_port, tb.rest_port))
        tb.ctl_proc = Proc(dies=len(started) == 1)
    monkeypatch.setattr(tb, "_start_controller", start)

    class Listening:
        def __init__(self, pid):
            pass

        def net_connections(self, kind):
            return [type("C", (), {"laddr": type("A", (), {"port": p})(), "status": lifecycle.psutil.CONN_LISTEN})()
                    for p in started[-1]]
    monkeypatch.setattr(lifecycle.psutil, "Process", Listening)
    assert tb._launch_controller("fabric.json") == 6003
    assert started == [(6001, 6002), (6003, 6004)]
    # A controller that never gets going names its log.
    monkeypatch.setattr(tb, "_start_controller", lambda *a, **k: setattr(tb, "ctl_proc", Proc(dies=True)))
    with pytest.raises(TestbedError, match="controller.log"):
        tb._launch_controller("fabric.json", attempts=2)


def test_the_controller_writes_one_log(tmp_path, monkeypatch):
    """Ryu's log lines and a crash's traceback in controller.log; no second copy beside it."""
    tb = Testbed(fat_tree(4), str(tmp_path), scale_link=2.5e-5)
    tb.rest_port, tb.state = 18080, type("State", (), {"add_pid": lambda self, role, pid: None})()
    started = {}

    def popen(cmd, stdout, stderr, **_kw):
        started.update(cmd=cmd, stdout=os.readlink(f"/proc/self/fd/{stdout.fileno()}"), stderr=stderr)
        return type("Proc", (), {"pid": 4242})()

    monkeypatch.setattr(lifecycle.subprocess, "Popen", popen)
    tb._start_controller(str(tmp_path / "fabric.json"), 16653)
    tb._ctl_log.close()
    assert "--log-file" not in started["cmd"]
    assert started["stdout"] == str(tmp_path / "controller.log") and started["stderr"] == lifecycle.subprocess.STDOUT
    # Beside it only its configuration file (fabric, policy, params, ports).
    assert sorted(os.listdir(tmp_path)) == ["controller.json", "controller.log"]


def test_the_controllers_two_ports_are_never_the_same():
    """The OpenFlow and REST ports are picked together: one at a time, the kernel may hand the
    same free port out twice, and the REST client then talked to the OpenFlow listener."""
    from emulator.testbed.process import free_ports
    for _ in range(200):
        a, b = free_ports(2)
        assert a != b
