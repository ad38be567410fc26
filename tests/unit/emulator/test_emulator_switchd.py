"""The run's own switch daemons, without root: options, sharding, where links are shaped, and
the OpenFlow relay between a daemon's namespace and the controller."""
import os
import socket
import threading

import pytest

from badinput import InputError
from emulator.check import check_switch_daemons
from emulator.run import fidelity
from emulator.testbed import capture, shaping, switchd
from emulator.testbed.datapath import parse_ovs_send_buffer
from emulator.testbed.lifecycle import Testbed
from emulator.testbed.process import wait_for
from experiment import model
from topologies import fat_tree, leaf_spine


def exp(faults=(), **testbed):
    return model.parse({"name": "d", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
                        "scale": {"link": 1e-4, "bytes": 4e-3}, "testbed": testbed, "faults": list(faults),
                        "jobs": [{"name": "j", "hosts": "all",
                                  "workload": {"collective": "all_reduce", "size_bytes": 1 << 20}}]})


@pytest.mark.parametrize("value", ["auto", "shared", 1, 2, 64])
def test_switch_daemons_takes_auto_shared_or_a_count(value):
    assert exp(switch_daemons=value).testbed.switch_daemons == value


@pytest.mark.parametrize("value", [0, 65, True, "two", 1.0])
def test_other_switch_daemons_are_refused_naming_the_key(value):
    with pytest.raises(InputError, match=r"testbed\.switch_daemons: expected auto, shared or an integer in 1\.\.64"):
        exp(switch_daemons=value)


@pytest.mark.parametrize("value", ["yes", 1, "on"])
def test_userspace_tso_takes_auto_true_or_false(value):
    assert exp().testbed.userspace_tso == "auto"
    assert exp(userspace_tso=True).testbed.userspace_tso is True
    assert exp(userspace_tso=False).testbed.userspace_tso is False
    with pytest.raises(InputError, match=r"testbed\.userspace_tso: expected auto, true or false"):
        exp(userspace_tso=value)


def never():
    raise AssertionError("the kernel module was looked for with an explicit datapath")


@pytest.mark.parametrize("daemons,tso,malloc,datapath,kernel,want", [
    ("auto", "auto", "auto", "auto", False, (1, True)),  # userspace: one own daemon with TSO
    ("auto", "auto", "auto", "userspace", None, (1, True)),
    ("auto", "auto", "auto", "auto", True, ("shared", False)),  # the lab VM's kernel datapath
    ("auto", "auto", "auto", "kernel", None, ("shared", False)),
    ("auto", "auto", "auto", "afxdp", None, ("shared", False)),
    ("auto", False, "auto", "auto", False, (1, False)),
    ("auto", True, "auto", "auto", True, (1, True)),  # asked for TSO: own daemons, the testbed says why not
    ("auto", "auto", "libc", "kernel", None, (1, True)),
    ("shared", "auto", "auto", "auto", False, ("shared", False)),
    (2, "auto", "auto", "auto", False, (2, True)),
    (2, False, "auto", "userspace", None, (2, False)),
])
def test_auto_picks_one_own_daemon_with_tso_on_the_userspace_datapath(daemons, tso, malloc, datapath, kernel, want):
    assert switchd.resolve(daemons, tso, malloc, datapath, (lambda: kernel) if kernel is not None else never) == want


def test_tso_needs_the_runs_own_daemon_and_system_ports():
    with pytest.raises(InputError, match=r"testbed\.userspace_tso: expected false with switch_daemons: shared"):
        check_switch_daemons(exp(userspace_tso=True, switch_daemons="shared").testbed)
    check_switch_daemons(exp(userspace_tso=True).testbed)  # auto: the run's own daemon
    check_switch_daemons(exp(datapath="kernel").testbed)  # auto: the shared daemon
    with pytest.raises(InputError, match=r"testbed\.switch_daemons: expected shared with datapath kernel"):
        check_switch_daemons(exp(userspace_tso=True, datapath="kernel").testbed)
    with pytest.raises(InputError, match=r"testbed\.switch_daemons: expected shared with datapath afxdp"):
        check_switch_daemons(exp(switch_daemons=1, datapath="afxdp").testbed)
    with pytest.raises(InputError, match=r"testbed\.switch_daemons: expected shared with datapath kernel"):
        check_switch_daemons(exp(switch_daemons=2, datapath="kernel").testbed)
    check_switch_daemons(exp(switch_daemons=2, userspace_tso=True).testbed)  # fine


def test_a_capture_on_an_own_daemons_switch_runs_in_its_namespace(tmp_path):
    fabric = fat_tree(4)
    ns = {"edge0_0": "xqd1"}

    def in_netns(node, argv):
        return ["ip", "netns", "exec", ns[node], *argv] if node in ns else argv
    plans = capture.plan([("h0", "edge0_0"), ("agg0_0", "core0")], fabric, lambda n, p: f"xq{n}-eth{fabric.port(n, p)}",
                         str(tmp_path), 10, 128, in_netns)
    assert plans[0]["cmd"][:4] == ["ip", "netns", "exec", "xqd1"] and plans[0]["cmd"][4] == "tcpdump"
    assert plans[1]["cmd"][0] == "tcpdump"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_shards_deal_every_layer_evenly(n):
    fabric = fat_tree(4)
    got = switchd.shard(fabric, n)
    assert sorted(got) == sorted(fabric.openflow_switches)
    for layer in ("core", "agg", "edge"):
        counts = [sum(1 for s, i in got.items() if i == d and fabric.node(s)["layer"] == layer) for d in range(n)]
        assert max(counts) - min(counts) <= 1, (layer, counts)


def test_tso_keeps_the_hosts_offloads_on_and_configures_the_daemon():
    assert "tso off" in shaping.offload_cmd(["a"]) and "tso on" not in shaping.offload_cmd(["a"])
    assert "tx on tso on gso on" in shaping.offload_cmd(["a"], tso=True)
    assert switchd.other_config(True) == {"userspace-tso-enable": "true"}
    assert switchd.other_config(False) == {}


def test_a_super_packet_lasts_at_most_a_tenth_of_a_link_sample():
    assert shaping.gso_max_bytes(40, 9000) == 65536  # 125 KB in 25 ms: the kernel's cap
    assert shaping.gso_max_bytes(10, 9000) == 31250
    assert shaping.gso_max_bytes(1.25, 9000) == 9000  # below one frame: frames, as without TSO
    for mbps in (1.25, 2.5, 10, 40, 80):
        n = shaping.gso_max_bytes(mbps, 9000)
        assert n <= max(9000, mbps * 1e6 / 8 * 0.025) and 9000 <= n <= 65536


def test_switch_side_of_each_link_is_shaped_in_its_daemons_namespace(tmp_path):
    fabric = leaf_spine(2, 1, 2)
    tb = Testbed(fabric, str(tmp_path), scale_link=1e-4, switch_daemons=2)
    tb.tag, tb.datapath = "xq", "userspace"
    tb.daemons = [switchd.SwitchDaemon("xq", i, str(tmp_path), {}) for i in range(2)]
    tb.daemon_of = {s: tb.daemons[i] for s, i in switchd.shard(fabric, 2).items()}
    for s in tb.plan_shaping():
        node = s.dev.removeprefix("xq").split("-eth")[0]
        if s.host is None:
            assert s.netns == tb.daemon_of[node].netns and s.netns.startswith("xq")
        else:
            assert s.netns is None and fabric.node(node)["role"] == "host"


def test_send_buffer_of_one_daemon_is_its_smallest_port_socket():
    line = 'p_raw UNCONN 0 0 *:{dev} *  users:(("ovs-vswitchd",pid={pid},fd=9)) skmem:(r0,rb212992,t0,tb{tb},f0)'
    text = "\n".join([line.format(dev="a-eth1", pid=11, tb=212992), line.format(dev="b-eth1", pid=22, tb=4194304),
                      line.format(dev="b-eth2", pid=22, tb=8388608)])
    assert parse_ovs_send_buffer(text, 22) == 4194304
    assert parse_ovs_send_buffer(text, 11) == 212992
    assert parse_ovs_send_buffer(text, 33) is None


def test_counters_merge_every_namespaces_net_dev(tmp_path):
    head = "Inter-|\n face |\n"
    (tmp_path / "a").write_text(head + "  d1: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n")
    (tmp_path / "b").write_text(head + "  d2: 30 3 0 0 0 0 0 0 40 4 0 0 0 0 0 0\n")
    got = fidelity.read_counters(["d1", "d2", "d3"], (str(tmp_path / "a"), str(tmp_path / "b")))
    assert got == {"d1": (20, 10), "d2": (40, 30)}


def test_clean_knows_a_runs_daemons_by_their_directory():
    assert switchd.is_daemon_cmdline("ovs-vswitchd unix:/run/dtnet/ovs-xa0/db.sock --no-chdir", "xa")
    assert switchd.is_daemon_cmdline("ovsdb-server /run/dtnet/ovs-xa1/conf.db --remote=x", "xa")
    assert not switchd.is_daemon_cmdline("ovs-vswitchd unix:/var/run/openvswitch/db.sock", "xa")
    assert not switchd.is_daemon_cmdline("ovs-vswitchd unix:/run/dtnet/ovs-xb0/db.sock", "xa")


def test_relay_carries_openflow_both_ways_and_closes_with_the_controller(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def echo_once():
        c, _ = srv.accept()
        c.sendall(c.recv(100).upper())
        c.close()  # the controller goes away

    t = threading.Thread(target=echo_once)
    t.start()
    path = os.path.join(str(tmp_path), "c.sock")
    relay = switchd.ControllerRelay(path, port)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(path)
        s.sendall(b"hello")
        assert s.recv(100) == b"HELLO"
        assert s.recv(100) == b""  # the switch learns the controller is gone, and will retry
    finally:
        relay.close()
        srv.close()
        t.join(5)


def test_closing_the_relay_ends_its_threads_with_a_connection_open(tmp_path):
    """One relay per run's daemon: a thread left blocked in accept() or recv() is a leak per run
    (bench_soak saw one more thread every cycle)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    before = {t for t in threading.enumerate() if t.name == "of-relay"}
    relay = switchd.ControllerRelay(os.path.join(str(tmp_path), "c.sock"), srv.getsockname()[1])
    s = socket.socket(socket.AF_UNIX)
    try:
        s.settimeout(10)
        s.connect(os.path.join(str(tmp_path), "c.sock"))
        up, _ = srv.accept()  # the controller's end stays open: both pumps block in recv()
        wait_for(lambda: len({t for t in threading.enumerate() if t.name == "of-relay"} - before) == 3, 10,
                 "the relay's accept thread and two pumps")
        relay.close()
        assert not {t for t in threading.enumerate() if t.name == "of-relay"} - before
        assert s.recv(100) == b""  # the switch's end learns it is gone
        up.close()
    finally:
        relay.close()
        s.close()
        srv.close()


def test_switch_malloc_is_for_the_runs_own_daemons_and_needs_the_library(monkeypatch):
    with pytest.raises(InputError, match=r"testbed\.switch_malloc: expected auto with switch_daemons: shared"):
        check_switch_daemons(exp(switch_malloc="libc", switch_daemons="shared").testbed)
    check_switch_daemons(exp(switch_malloc="libc").testbed)  # auto: the run's own daemon
    with pytest.raises(InputError, match=r"testbed\.switch_malloc: expected one of auto, tcmalloc, libc"):
        exp(switch_daemons=1, switch_malloc="jemalloc")
    check_switch_daemons(exp(switch_daemons=1, switch_malloc="libc").testbed)  # fine
    monkeypatch.setattr(switchd, "tcmalloc_path", lambda: None)
    with pytest.raises(InputError, match=r"testbed\.switch_malloc: expected auto or libc on this machine"):
        check_switch_daemons(exp(switch_daemons=1, switch_malloc="tcmalloc").testbed)
    check_switch_daemons(exp(switch_daemons=1).testbed)  # auto: glibc's then


def test_malloc_env_preloads_tcmalloc_unless_told_libc(monkeypatch):
    monkeypatch.setattr(switchd, "tcmalloc_path", lambda: "/usr/lib/x/libtcmalloc_minimal.so.4")
    assert switchd.malloc_env("auto") == switchd.malloc_env("tcmalloc") == {"LD_PRELOAD": "/usr/lib/x/libtcmalloc_minimal.so.4"}
    assert switchd.malloc_env("libc") == {}
    monkeypatch.setattr(switchd, "tcmalloc_path", lambda: None)
    assert switchd.malloc_env("auto") == {}
    with pytest.raises(switchd.TestbedError, match="tcmalloc is not installed"):
        switchd.malloc_env("tcmalloc")


def test_loaded_malloc_reads_what_a_process_mapped(tmp_path):
    import subprocess
    import sys
    assert switchd.loaded_malloc(os.getpid()) == "libc"
    assert switchd.loaded_malloc(None) is None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert switchd.loaded_malloc(gone.pid) is None
    lib = switchd.tcmalloc_path()
    if lib is None:
        pytest.skip("tcmalloc is not installed (scripts/bootstrap.sh installs it)")
    # A process that has started and mapped its libraries: it prints, then waits on stdin.
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                         env={**os.environ, **switchd.malloc_env("auto")}, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        assert switchd.loaded_malloc(p.pid) == "tcmalloc"
    finally:
        p.stdin.close()
        p.wait(10)


def test_the_shared_daemons_pid_comes_from_its_pidfile(tmp_path):
    f = tmp_path / "ovs-vswitchd.pid"
    assert switchd.shared_vswitchd_pid(str(f)) is None
    f.write_text("2557\n")
    assert switchd.shared_vswitchd_pid(str(f)) == 2557
    f.write_text("not a pid")
    assert switchd.shared_vswitchd_pid(str(f)) is None


def test_the_link_cap_is_judged_with_the_frames_the_testbed_sets():
    from emulator.run.runner import frame_bytes
    assert frame_bytes(exp(), "userspace") == 36000  # sized to its 40 Mb/s links: 7.2 ms of them
    assert frame_bytes(exp(datapath="afxdp"), "afxdp") == 3000
    small = model.parse({**model.to_dict(exp()), "transport": {"mtu_bytes": 1500}})
    assert frame_bytes(small, "userspace") == 1500
    assert fidelity.link_cap_max(2.5, frame_bytes(small, "userspace")) == fidelity.LINK_CAP_MAX
