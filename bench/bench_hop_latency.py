"""The delay one emulated switch hop adds: ping RTT through 1, 3 and 5 OVS switches.

A chain of five OpenFlow switches (standalone: learning, no controller), hosts on the first,
the third and the last, so that h0 reaches h1 through 1 switch, h2 through 3 and h3 through 5,
on the datapath the emulator picks here (testbed.datapath auto). Links are shaped at
1000 Mb/s (Mininet's ceiling), where a ping's 98-byte frame takes 0.8 us a link, so the
slope is the switches' own cost. A line fitted through RTT against the links crossed gives
the one-way delay of a hop (slope / 2) and of each host's stack (intercept / 4, as each RTT
crosses a host link four times): what `packet: {units: emulated}` adds to each link
(packetsim.emulated). Needs root and the Mininet lock:

    flock -o /tmp/dtnet-mininet.lock .venv/bin/python bench/bench_hop_latency.py [--count 300]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.testbed.lifecycle import Testbed  # noqa: E402
from topologies.files import from_data  # noqa: E402

SWITCHES = 5
PEERS = {"h1": 1, "h2": 3, "h3": 5}  # host -> switches between h0 and it


def chain():
    nodes = {"h0": {"role": "host"}, "h1": {"role": "host"}, "h2": {"role": "host"}, "h3": {"role": "host"},
             **{f"s{i}": {"role": "switch"} for i in range(SWITCHES)}}
    links = [{"a": "h0", "b": "s0"}, {"a": "h1", "b": "s0"}, {"a": "h2", "b": "s2"}, {"a": "h3", "b": "s4"}]
    links += [{"a": f"s{i}", "b": f"s{i + 1}"} for i in range(SWITCHES - 1)]
    return from_data({"name": "chain", "link_gbps": 1, "nodes": nodes, "links": links})


def rtts_ms(out: str) -> list[float]:
    """Every reply's RTT in a ping's output (a pure parser)."""
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", out)]


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares (intercept, slope) of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300, help="pings per peer (the first 20 warm up and are dropped)")
    ap.add_argument("--datapath", default="auto")
    args = ap.parse_args(argv)
    fabric = chain()
    pts = []
    with tempfile.TemporaryDirectory() as d:
        with Testbed(fabric, d, scale_link=1.0, controller=False, datapath=args.datapath,
                     log=lambda *_: None) as tb:
            print(f"datapath {tb.datapath}, {SWITCHES} switches in a chain, links at 1000 Mb/s")
            h0 = tb.host("h0")
            for peer, switches in PEERS.items():
                ip = fabric.node(peer)["ip"]
                r = rtts_ms(h0.cmd(f"ping -c {args.count} -i 0.01 -W 1 {ip}"))[20:]
                if not r:
                    print(f"{peer}: no reply", file=sys.stderr)
                    return 1
                med = statistics.median(r)
                pts.append((switches + 1, med * 1e3))
                print(f"{switches} switches ({switches + 1} links): RTT median {med * 1e3:.1f} us, "
                      f"p10 {sorted(r)[len(r) // 10] * 1e3:.1f} us, p90 {sorted(r)[len(r) * 9 // 10] * 1e3:.1f} us, "
                      f"{len(r)} replies")
    c, s = fit(pts)
    print(f"fit: RTT = {c:.1f} us + {s:.1f} us per link; one-way per hop {s / 2:.1f} us, "
          f"per host stack {c / 4:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
