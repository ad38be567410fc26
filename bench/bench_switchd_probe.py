"""One switch, two hosts, outside dtnet's testbed: what a run's own ovs-vswitchd costs per
packet with and without userspace TSO, and whether HTB holds its rate with super-packets.

A switch daemon of its own (emulator.testbed.switchd, in a namespace of its own) with one
netdev bridge in standalone mode; two host namespaces, each joined to it by a veth; HTB at
--rate-mbps on both switch ports (the switch-to-host direction, as the testbed shapes it);
one iperf3 stream h1 -> h2. Prints the received rate, the retransmits, ovs-vswitchd's CPU
(% of one core, psutil) and the packets per second and mean packet size its ports carried.

    sudo flock -o /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_switchd_probe.py \\
        [--tso] [--host-offloads] [--rate-mbps 40] [--seconds 5] [--mtu 9000] [--pmd-cpu-mask 0x3]

--tso sets other_config:userspace-tso-enable before the daemon starts; --host-offloads
leaves TX checksum, TSO, GSO and GRO on at the hosts (the testbed turns them off on the
shared daemon: without userspace TSO, TCP then stalls). --pmd-cpu-mask makes the ports
`afxdp` (generic XDP mode, MTU at most 3000) polled by PMD threads on those cores. Needs
root; removes what it made.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.testbed import shaping, switchd  # noqa: E402
from emulator.testbed.process import stop_process, wait_for  # noqa: E402

TAG = "pr"  # not one of dtnet's run tags (runstate._TAGS): nothing here is a run's
HOSTS = ("prh1", "prh2")


class _State:
    """The daemons' PIDs go here (the testbed writes them to state.json)."""

    def add_pid(self, role, pid):
        pass


def sh(cmd: str, check: bool = True) -> str:
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"bench_switchd_probe: {cmd}: {r.stderr.strip()}")
    return r.stdout


def port_counters(daemon) -> dict:
    """{dev: (rx_packets, rx_bytes, tx_packets, tx_bytes)} in the daemon's namespace."""
    out = {}
    with open(daemon.net_dev_path()) as f:
        for line in f.read().splitlines()[2:]:
            name, _, rest = line.partition(":")
            v = rest.split()
            out[name.strip()] = (int(v[1]), int(v[0]), int(v[9]), int(v[8]))
    return out


def probe(tso: bool, host_offloads: bool, rate_mbps: float, seconds: float, mtu: int, pmd_mask: str | None) -> dict:
    run_dir = tempfile.mkdtemp(prefix="dtnet-switchd-probe-")
    config = switchd.other_config(tso)
    if pmd_mask:
        config["pmd-cpu-mask"] = pmd_mask
    d = switchd.SwitchDaemon(TAG, 0, run_dir, config)
    iperf = []
    try:
        d.start(_State())
        vs = d.vsctl()
        subprocess.run([*vs, "add-br", "prbr", "--", "set", "bridge", "prbr", "datapath_type=netdev",
                        "fail_mode=standalone"], check=True, capture_output=True)
        for i, h in enumerate(HOSTS, 1):
            port = f"prp{i}"
            sh(f"ip netns add {h}")
            sh(f"ip link add {port} mtu {mtu} netns {d.netns} type veth peer name eth0 mtu {mtu} netns {h}")
            sh(f"ip -n {h} addr add 10.99.0.{i}/24 dev eth0; ip -n {h} link set eth0 up; ip -n {h} link set lo up")
            sh(f"ip -n {d.netns} link set {port} up")
            sh(f"ip netns exec {h} sh -c '{shaping.offload_cmd(['eth0'], tso=host_offloads)}'", check=False)
            sh(f"ip netns exec {d.netns} sh -c '{shaping.offload_cmd([port], tso=host_offloads)}'", check=False)
            afxdp = ["--", "set", "interface", port, "type=afxdp", "options:xdp-mode=generic"] if pmd_mask else []
            subprocess.run([*vs, "add-port", "prbr", port, *afxdp], check=True, capture_output=True)
        # A fresh daemon resets a port's qdisc once it has taken the port: shape after that.
        wait_for(lambda: all("driver_name" in subprocess.run([*vs, "get", "interface", f"prp{i}", "status"],
                                                             capture_output=True, text=True).stdout
                             for i in (1, 2)), 20, "the daemon to take both ports")
        if rate_mbps > 0:
            for i in (1, 2):
                lines = shaping.htb_cmds(f"prp{i}", rate_mbps, 1000, mtu)
                r = subprocess.run(["tc", "-n", d.netns, "-batch", "-"], input="\n".join(lines) + "\n",
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"bench_switchd_probe: tc: {r.stderr.strip()}")
        iperf.append(subprocess.Popen(["ip", "netns", "exec", HOSTS[1], "iperf3", "-s", "-1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: ":5201 " in sh(f"ip netns exec {HOSTS[1]} ss -ltnH", check=False), 10, "iperf3 server")
        proc = psutil.Process(d.pid("ovs-vswitchd"))
        c0, n0, t0 = proc.cpu_times(), port_counters(d), time.monotonic()
        client = subprocess.Popen(["ip", "netns", "exec", HOSTS[0], "iperf3", "-c", "10.99.0.2", "-t", f"{seconds:g}",
                                   "-J"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        iperf.append(client)
        try:
            out = client.communicate(timeout=seconds + 20)[0]
        except subprocess.TimeoutExpired:
            out = ""  # the stall: iperf3 never finished
        c1, n1, t1 = proc.cpu_times(), port_counters(d), time.monotonic()
        try:
            end = json.loads(out)["end"]
            mbps, rtx = end["sum_received"]["bits_per_second"] / 1e6, end["sum_sent"].get("retransmits")
        except (ValueError, KeyError):
            mbps, rtx = 0.0, None
        dt = t1 - t0
        rx_p, rx_b = n1["prp1"][0] - n0["prp1"][0], n1["prp1"][1] - n0["prp1"][1]
        tx_p = n1["prp2"][2] - n0["prp2"][2]
        tc = subprocess.run(["tc", "-n", d.netns, "-s", "class", "show", "dev", "prp2"], capture_output=True,
                            text=True).stdout.split()
        # The root class carries every byte its leaves do: the largest count is what HTB sent.
        htb_bytes = max((int(tc[i + 1]) for i, w in enumerate(tc) if w == "Sent"), default=0)
        return {"tso": tso, "host_offloads": host_offloads, "pmd_cpu_mask": pmd_mask, "mtu": mtu,
                "rate_mbps": rate_mbps, "htb_sent_bytes_to_h2": htb_bytes, "received_mbps": round(mbps, 1),
                "retransmits": rtx, "vswitchd_cpu_pct": round(100 * (c1.user + c1.system - c0.user - c0.system) / dt, 1),
                "data_pps": round(rx_p / dt), "mean_packet_bytes": round(rx_b / max(rx_p, 1)),
                "to_h2_pps": round(tx_p / dt)}
    finally:
        for p in iperf:
            if p.poll() is None:
                stop_process(p)
        for h in HOSTS:
            subprocess.run(["ip", "netns", "del", h], capture_output=True)
        d.stop()  # its namespace, with the switch ends of the veths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tso", action="store_true", help="other_config:userspace-tso-enable=true")
    ap.add_argument("--host-offloads", action="store_true", help="TX checksum, TSO, GSO, GRO on at the hosts")
    ap.add_argument("--rate-mbps", type=float, default=40.0, help="HTB on the switch ports; 0: none")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--mtu", type=int, default=9000)
    ap.add_argument("--pmd-cpu-mask", default=None, help="afxdp ports polled by PMD threads on these cores")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_switchd_probe: needs root", file=sys.stderr)
        return 2
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(json.dumps(probe(a.tso, a.host_offloads, a.rate_mbps, a.seconds, a.mtu, a.pmd_cpu_mask)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
