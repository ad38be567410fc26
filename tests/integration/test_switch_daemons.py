"""The run's own switch daemons (testbed.switch_daemons: 2, userspace_tso: true): two real
ovsdb-server + ovs-vswitchd pairs, each in a namespace of its own, the real controller reached
through their relays. Each daemon holds its share of the switches and the shared daemon none;
every link direction holds its rate (also the ones that cross from one daemon to the other);
super-packets larger than the MTU cross the switches; and nothing of the daemons outlives the
run."""
import json
import os
import signal
import subprocess

import psutil
import pytest

from emulator.testbed import runstate, switchd
from emulator.testbed.datapath import ovs_running
from emulator.testbed.iperf import iperf3_flows
from emulator.testbed.lifecycle import Testbed
from tests.integration.helpers import assert_nothing_left, dtnet, start_run, wall_s
from tests.integration.test_shaping import CASES, SCALE_LINK
from topologies import leaf_spine

pytestmark = pytest.mark.mininet


def tx_packets_bytes(path: str, dev: str) -> tuple[int, int]:
    for line in open(path).read().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == dev:
            f = rest.split()
            return int(f[9]), int(f[8])
    raise AssertionError(f"{dev} not in {path}")


def test_two_own_daemons_with_tso_forward_shape_and_leave_nothing(tmp_path):
    fabric = leaf_spine(2, 1, 2)
    rate_mbps = 400e3 * SCALE_LINK
    got = {}
    with Testbed(fabric, str(tmp_path), routing="shortest", scale_link=SCALE_LINK, switch_daemons=2,
                 userspace_tso=True, log=lambda *_: None) as tb:
        daemons = tb.daemons
        pids = [d.pid(role) for d in daemons for role in ("ovsdb-server", "ovs-vswitchd")]
        owned = set()
        for d in daemons:
            bridges = subprocess.run([*d.vsctl(), "list-br"], capture_output=True, text=True).stdout.split()
            assert sorted(bridges) == sorted(tb.mn_name(s) for s, dd in tb.daemon_of.items() if dd is d)
            assert 'userspace-tso-enable="true"' in d.other_config_now()
            owned |= set(bridges)
        assert len(owned) == len(fabric.openflow_switches)
        # switch_malloc auto: tcmalloc where installed, as each daemon's own maps show.
        want = "tcmalloc" if switchd.tcmalloc_path() else "libc"
        assert tb.switch_daemons_summary()["malloc"] == [want, want]
        if ovs_running():
            shared = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
            assert not owned & set(shared)
        # spine0 -> leaf1 crosses from one daemon to the other; its port lives in spine0's namespace.
        assert tb.daemon_of["spine0"] is not tb.daemon_of["leaf1"]
        port = tb.intf("spine0", "leaf1")
        net_dev = tb.daemon_of["spine0"].net_dev_path()
        for name, flows in CASES.items():
            p0, b0 = tx_packets_bytes(net_dev, port)
            got[name] = sum(iperf3_flows(tb, flows, duration_s=4)) / rate_mbps
            p1, b1 = tx_packets_bytes(net_dev, port)
            if name == "leaf0->spine":  # data only on spine0 -> leaf1 (the ACKs go the other way)
                mean_packet_bytes = (b1 - b0) / max(1, p1 - p0)
    assert_nothing_left(tmp_path)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not any(os.path.exists(d.dir) for d in daemons)
    assert not runstate.leftovers(tb.tag)["netns"]
    for name, share in got.items():
        assert 0.85 <= share <= 1.05, f"{name} delivered {share:.3f} of the link rate ({got})"
    # Super-packets: the hosts' TSO/GSO stays on, and the switches carry what the hosts sent.
    assert mean_packet_bytes > tb.mtu, f"mean packet {mean_packet_bytes:.0f} B, MTU {tb.mtu}"


OWN = ("testbed.switch_daemons=2", "testbed.userspace_tso=true")


def test_ctrl_c_mid_run_stops_the_runs_own_daemons(tmp_path):
    out = tmp_path / "r"
    p, _ = start_run(out, "ring-single-switch.yaml", *OWN)
    st = json.load(open(out / "state.json"))
    assert any(role.startswith("ovs-vswitchd/") for role in st["pids"])
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=wall_s(30))[0]
    assert p.returncode == 130, rest
    summary = json.load(open(out / "summary.json"))
    assert summary["switch_daemons"]["daemons"] == 2 and summary["switch_daemons"]["userspace_tso"] is True
    assert_nothing_left(out)


def test_sigkill_then_dtnet_clean_ends_the_runs_own_daemons(tmp_path):
    out = tmp_path / "r"
    p, _ = start_run(out, "ring-single-switch.yaml", *OWN)
    st = json.load(open(out / "state.json"))
    p.kill()
    p.wait(wall_s(10))
    left = runstate.leftovers(st["tag"])
    assert left["netns"] and left["daemon_dirs"], "nothing to clean: the test proves nothing"
    daemons = [pid for role, pid in st["pids"].items() if role.split("/")[0] in ("ovs-vswitchd", "ovsdb-server")]
    assert daemons and all(psutil.pid_exists(pid) for pid in daemons)
    r = dtnet("clean", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert_nothing_left(out)
