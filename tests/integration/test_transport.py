"""transport: on the emulator: tcp.cc reaches the agents' own connections (ss inside each
host's namespace names it), and mtu_bytes reaches every interface (a full-size frame that may
not fragment crosses the switch, one byte more does not leave the host)."""
import json
import signal
import subprocess
import time

import pytest

from emulator.testbed import runstate
from tests.integration.helpers import assert_nothing_left, start_run, wall_s
from topologies import build

pytestmark = pytest.mark.mininet


def in_host(pid: int, *cmd: str) -> str:
    return subprocess.run(["nsenter", "-t", str(pid), "-n", *cmd], capture_output=True, text=True).stdout


def stop(p, out):
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=wall_s(60))[0]
    assert p.returncode == 130, rest
    assert_nothing_left(out)


def agent_cc(pid: int) -> set[str]:
    """The congestion control of each established TCP connection of the agents' ports."""
    names = set()
    for line in in_host(pid, "ss", "-tinH", "state", "established", "( sport >= :20000 or dport >= :20000 )") \
            .splitlines():
        for cc in ("cubic", "bbr", "reno"):
            if f" {cc} " in f" {line.strip()} ":
                names.add(cc)
    return names


# The root namespace's default is what a new namespace starts with: test a value other than it too.
@pytest.mark.parametrize("cc", ["bbr", "cubic"])
def test_cc_reaches_the_agents_connections(tmp_path, cc):
    out = tmp_path / "run"
    p, _ = start_run(out, "ring-single-switch.yaml", f"transport.tcp.cc={cc}")
    try:
        pids = json.load(open(out / "state.json"))["host_pids"]
        deadline = time.monotonic() + wall_s(30)
        seen = {}
        while time.monotonic() < deadline:
            seen = {h: agent_cc(pid) for h, pid in pids.items()}
            if all(seen.values()):
                break
            time.sleep(0.2)
        sysctl = {h: in_host(pid, "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip()
                  for h, pid in pids.items()}
    finally:
        stop(p, out)
    assert all(v == {cc} for v in seen.values()), seen
    assert set(sysctl.values()) == {cc}, sysctl


def link_mtu(ip_link: str) -> str:
    words = ip_link.split()
    return words[words.index("mtu") + 1] if "mtu" in words else ""


def bfifo_limits(tc_json: str) -> list[int]:
    return sorted(q["options"]["limit"] for q in json.loads(tc_json or "[]") if q.get("kind") == "bfifo")


def h0_and_switch_mtus(st: dict, fab):
    """h0's pid, the command prefix into the switch's namespace, s0's port to h0, and the MTU of
    h0's and of that switch port's interface. The switch's ports are in its own daemon's namespace
    (switch_daemons: auto), else in the root one."""
    h0 = st["host_pids"]["h0"]
    have = link_mtu(in_host(h0, "ip", "-o", "link", "show", "dev", f"{st['tag']}h0-eth{fab.port('h0', 's0')}"))
    netns = runstate.leftovers(st["tag"])["netns"]
    in_sw = ["ip", "netns", "exec", netns[0]] if netns else []
    sw_dev = f"{st['tag']}s0-eth{fab.port('s0', 'h0')}"
    sw = link_mtu(subprocess.run([*in_sw, "ip", "-o", "link", "show", "dev", sw_dev], capture_output=True,
                                 text=True).stdout)
    return h0, in_sw, sw_dev, have, sw


def test_mtu_and_switch_buffer_reach_the_interfaces(tmp_path):
    """The MTU on a host's and a switch's interface; the switch buffer, scaled by scale.bytes
    (16 MB x 1e-3), under the switch port's HTB, while the host's NIC keeps queue_packets."""
    out = tmp_path / "run"
    mtu, buffer_bytes = 4000, 16_000_000
    p, _ = start_run(out, "ring-single-switch.yaml", f"transport.mtu_bytes={mtu}",
                     f"transport.switch_buffer_bytes={buffer_bytes}")
    try:
        st, fab = json.load(open(out / "state.json")), build("single-switch", {"hosts": 8})
        h0, in_sw, sw_dev, have, sw = h0_and_switch_mtus(st, fab)
        sw_q = bfifo_limits(subprocess.run([*in_sw, "tc", "-j", "qdisc", "show", "dev", sw_dev],
                                           capture_output=True, text=True).stdout)
        host_q = bfifo_limits(in_host(h0, "tc", "-j", "qdisc", "show", "dev", f"{st['tag']}h0-eth{fab.port('h0', 's0')}"))
        ip1 = fab.node("h1")["ip"]
        full = in_host(h0, "ping", "-c", "3", "-W", "2", "-M", "do", "-s", str(mtu - 28), ip1)
        over = subprocess.run(["nsenter", "-t", str(h0), "-n", "ping", "-c", "1", "-W", "1", "-M", "do", "-s",
                               str(mtu - 27), ip1], capture_output=True, text=True)
    finally:
        stop(p, out)
    assert have == str(mtu) and sw == str(mtu), (have, sw)
    assert sw_q == [16000, 16000] and host_q == [1000 * 1500] * 2, (sw_q, host_q)
    # A full-size frame crosses with DF set. Not every echo need come back: the run's own ring
    # traffic shares the 16 kB switch port (four frames), which may drop one.
    assert f"{mtu - 20} bytes from {ip1}" in full, full
    assert over.returncode != 0 and "message too long" in (over.stdout + over.stderr).lower(), over


def test_frames_are_sized_to_fast_links(tmp_path):
    """Without mtu_bytes, a run on 40 Mb/s links gets 36,000-byte frames (7.2 ms each, what 9000
    bytes take at 10 Mb/s) on its hosts' and switch's interfaces, and a full one crosses."""
    out = tmp_path / "run"
    mtu = 36000
    p, _ = start_run(out, "ring-single-switch.yaml", "scale.link=1e-4", "scale.bytes=4e-3")
    try:
        st, fab = json.load(open(out / "state.json")), build("single-switch", {"hosts": 8})
        h0, _, _, have, sw = h0_and_switch_mtus(st, fab)
        full = in_host(h0, "ping", "-c", "3", "-W", "2", "-M", "do", "-s", str(mtu - 28), fab.node("h1")["ip"])
    finally:
        stop(p, out)
    assert have == str(mtu) and sw == str(mtu), (have, sw)
    assert f"{mtu - 20} bytes from" in full, full
