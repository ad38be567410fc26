"""The largest MTU this machine's Open vSwitch datapath carries between two Mininet hosts.

For each candidate MTU, a two-host single-switch testbed (no controller: a standalone
switch) is built with every interface at that MTU, and a ping that may not fragment
(`ping -M do`) with a payload filling the frame must come back. Needs root and the
Mininet lock; prints one line per candidate and the largest that passed.

    sudo .venv/bin/python bench/probe_mtu.py [--mtus 1500,9000,16000,65000,65535]
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.testbed.lifecycle import Testbed  # noqa: E402
from emulator.testbed.process import TestbedError  # noqa: E402
from topologies import build  # noqa: E402

ICMP_IPV4_HEADERS = 28  # 20 (IPv4) + 8 (ICMP echo)


def passes(mtu: int, datapath: str) -> tuple[bool, str]:
    """Whether one unfragmented ping filling an MTU-sized frame crosses the switch, and what the
    host interface then says its MTU is."""
    fabric = build("single-switch", {"hosts": 2, "link_gbps": 0.01})
    with tempfile.TemporaryDirectory() as d:
        try:
            with Testbed(fabric, d, scale_link=1.0, controller=False, mtu=mtu, datapath=datapath,
                         log=lambda *_: None) as tb:
                h0, ip1 = tb.host("h0"), fabric.node("h1")["ip"]
                dev = tb.intf("h0", fabric.attachment("h0")[0])
                have = h0.cmd(f"cat /sys/class/net/{dev}/mtu").strip()
                out = h0.cmd(f"ping -c 3 -W 2 -M do -s {mtu - ICMP_IPV4_HEADERS} {ip1}")
                got = re.search(r"(\d+) received", out)
                return bool(got and int(got.group(1)) > 0), f"interface mtu {have}, {got.group(0) if got else out[-80:]}"
        except TestbedError as e:
            return False, str(e)[:120]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtus", default="1500,9000,16000,65000,65535",
                    help="candidate MTUs in bytes, comma-separated, tried in increasing order")
    ap.add_argument("--datapath", default="auto", help="testbed.datapath (auto, kernel, userspace, afxdp)")
    args = ap.parse_args(argv)
    best = None
    for mtu in sorted(int(m) for m in args.mtus.split(",")):
        ok, detail = passes(mtu, args.datapath)
        print(f"mtu {mtu}: {'passes' if ok else 'does not pass'} ({detail})", flush=True)
        if ok:
            best = mtu
    print(f"largest MTU that passes: {best}")
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(main())
