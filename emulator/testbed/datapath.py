"""Open vSwitch and its datapaths: start OVS, detect which datapath this machine has.

The kernel datapath where the openvswitch module exists (a VM), else the
userspace one with `system` ports; AF_XDP ports only on request.
"""
from __future__ import annotations

import os
import subprocess

from emulator.testbed.process import TestbedError, closed_fds_argv
from experiment.transport import AFXDP_MTU_BYTES, EMULATOR_MTU_BYTES

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


def ovs_running() -> bool:
    r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True)
    return r.returncode == 0


def ensure_ovs() -> None:
    if ovs_running():
        return
    if not os.path.exists(OVS_CTL):
        raise TestbedError("Open vSwitch is not installed: run `make setup`")
    raise_send_buffer_default()
    # Its daemons outlive this run: they get none of our descriptors (a caller's flock'ed lock).
    subprocess.run(closed_fds_argv([OVS_CTL, "start", "--system-id=random"]), capture_output=True, close_fds=True)
    if not ovs_running():
        raise TestbedError("Open vSwitch did not start (see `ovs-ctl start`)")


def raise_send_buffer_default() -> None:
    """The switch's shared send socket takes its buffer from wmem_default when ovs-vswitchd starts."""
    try:
        with open("/proc/sys/net/core/wmem_default", "r+") as f:
            if int(f.read()) < OVS_SEND_BUFFER_BYTES:
                f.seek(0)
                f.write(str(OVS_SEND_BUFFER_BYTES))
    except (OSError, ValueError):
        pass


def kernel_datapath_available() -> bool:
    """The OVS kernel module is loaded or loadable (a VM with modules)."""
    if os.path.isdir("/sys/module/openvswitch"):
        return True
    r = subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True)
    return r.returncode == 0 and os.path.isdir("/sys/module/openvswitch")


def netem_available() -> bool:
    """sch_netem works here: a netem qdisc goes onto loopback in a throwaway
    network namespace (unshare -n), so nothing outside it is touched."""
    try:
        r = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us"],
                           capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


# AF_XDP port type without a busy-polling thread: PMD ports take a whole core,
# which on 2 cores starves the hosts.
AFXDP_PORT = "afxdp-nonpmd"
AFXDP_MTU = AFXDP_MTU_BYTES  # experiment.transport says why
MTU = EMULATOR_MTU_BYTES


def ovs_iface_types(vsctl: list[str] | None = None) -> set[str]:
    """The port types an ovs-vswitchd offers (vsctl: the ovs-vsctl of another database than the shared one)."""
    r = subprocess.run([*(vsctl or ["ovs-vsctl"]), "--timeout=5", "get", "Open_vSwitch", ".", "iface_types"],
                       capture_output=True, text=True)
    return {t.strip() for t in r.stdout.strip().strip("[]").split(",") if t.strip()}


def detect_datapath(requested: str = "auto", iface_types: set[str] | None = None) -> str:
    """kernel where the OVS module exists (a VM), else userspace `system` ports.

    AF_XDP is a choice, not the default: measured here (bench/bench_capacity.py),
    its 3000-byte MTU ceiling and the extra IFB and bridge hops its shaping
    needs cost more than its cheaper ports save against system ports with
    9000-byte frames (fat-tree k=4, iperf3: 0.72 vs 0.98 of 20 Mb/s links)."""
    if requested == "kernel" and not kernel_datapath_available():
        raise TestbedError("testbed.datapath=kernel but the openvswitch kernel module is not available")
    types = ovs_iface_types() if iface_types is None and requested == "afxdp" else iface_types or set()
    if requested == "afxdp" and AFXDP_PORT not in types:
        raise TestbedError(f"testbed.datapath=afxdp but this Open vSwitch has no {AFXDP_PORT} ports "
                           f"(iface_types: {', '.join(sorted(types)) or 'none'})")
    if requested == "auto":
        return "kernel" if kernel_datapath_available() else "userspace"
    return requested


# What the userspace switch's one shared send socket needs: see bootstrap.sh.
OVS_SEND_BUFFER_BYTES = 4194304


def parse_ovs_send_buffer(ss_text: str, pid: int | None = None) -> int | None:
    """The send buffer (skmem tb) of ovs-vswitchd's unbound AF_PACKET socket,
    the one the shared daemon transmits every system port's packets through,
    from `ss -0 -a -m -p -H`; None when there is none (yet). With pid: the
    smallest over that daemon's packet sockets (a run's own daemon, started
    in a namespace of its own, sends through each port's bound socket)."""
    found = []
    for line in ss_text.splitlines():
        if pid is not None and f'"ovs-vswitchd",pid={pid},' not in line:
            continue
        if '"ovs-vswitchd"' in line and (pid is not None or "[0]:*" in line) and "skmem:(" in line:
            fields = dict((f[:2].rstrip("0123456789"), f) for f in line.split("skmem:(")[1].split(")")[0].split(","))
            tb = fields.get("tb")
            if tb and tb[2:].isdigit():
                found.append(int(tb[2:]))
                if pid is None:
                    break
    return min(found) if found else None


def ovs_send_buffer(pid: int | None = None, netns: str | None = None) -> int | None:
    """netns: the named namespace the daemon runs in (ss lists one namespace's sockets)."""
    cmd = ["ss", "-0", "-a", "-m", "-p", "-H"]
    r = subprocess.run(cmd if netns is None else ["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True)
    return parse_ovs_send_buffer(r.stdout, pid)
