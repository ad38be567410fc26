"""Which priority mechanism does this datapath enforce? Measured, not assumed.

Two TCP flows (iperf3) share one shaped link into h2 of a single-switch
fabric (OVS, no controller: flows are set with ovs-ofctl): h0 -> h2 is the
high-priority flow, h1 -> h2 the low-priority one, which each mechanism
tries to hold to ``--cap`` of the link rate:

  none         nothing: the two flows share the link
  queue        OpenFlow set_queue into a linux-htb QoS on the switch port
               (queue 1 has max-rate = cap)
  meter        an OpenFlow 1.3 meter with a drop band at the cap
  so_pacing    the sender's SO_MAX_PACING_RATE (iperf3 --fq-rate), in the host
  app_pacing   the sender paces its own writes (iperf3 -b)

A mechanism is "enforced" when the low flow stays within 15% of its cap and
the high flow gets at least 80% of what is left. Needs root; one run takes
about a minute.

    sudo .venv/bin/python bench/bench_priority.py [--seconds 6] [--cap 0.2] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.testbed import shaping  # noqa: E402
from emulator.testbed.lifecycle import Testbed  # noqa: E402
from emulator.testbed.process import wait_for  # noqa: E402
from topologies import single_switch  # noqa: E402

MECHANISMS = ("none", "queue", "meter", "so_pacing", "app_pacing")
HIGH, LOW, SINK = "h0", "h1", "h2"
PORT_HIGH, PORT_LOW = 5201, 5202
QUEUE_PACKETS = 1000


def iperf3_figures(report: dict) -> dict:
    """Received Mb/s and sender retransmits from one `iperf3 -J` client report."""
    if report.get("error"):
        raise RuntimeError(f"iperf3: {report['error']}")
    end = report["end"]
    return {"mbps": end["sum_received"]["bits_per_second"] / 1e6,
            "retransmits": end["sum_sent"].get("retransmits", 0)}


def verdict(high_mbps: float, low_mbps: float, link_mbps: float, cap_mbps: float) -> bool:
    return low_mbps <= 1.15 * cap_mbps and high_mbps >= 0.8 * (link_mbps - cap_mbps)


def sh(*cmd: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()[:300]}")
    return r.stdout


class Bench:
    def __init__(self, tb: Testbed, link_mbps: float, cap_mbps: float, seconds: float):
        self.tb, self.link_mbps, self.cap_mbps, self.seconds = tb, link_mbps, cap_mbps, seconds
        f = tb.fabric
        self.bridge = tb.mn_name("s0")
        self.port = {h: f.port("s0", h) for h in f.hosts}
        self.ip = {h: f.node(h)["ip"] for h in f.hosts}
        self.bottleneck = tb.intf("s0", SINK)  # the switch's egress into the sink

    def ofctl(self, *args: str) -> str:
        return sh("ovs-ofctl", "-O", "OpenFlow13", *args)

    def run_pair(self, low_args: list[str]) -> dict:
        sink = self.tb.host(SINK)
        # Our own children (no -D), so they are ended by PID whatever happens.
        servers = [sink.popen(["iperf3", "-s", "-1", "-p", str(port)]) for port in (PORT_HIGH, PORT_LOW)]
        try:
            wait_for(lambda: all(f":{p} " in sink.cmd("ss -Hltn") for p in (PORT_HIGH, PORT_LOW)), 10,
                     "the iperf3 servers to listen")
            t = str(self.seconds)
            procs = {
                "high": self.tb.host(HIGH).popen(["iperf3", "-c", self.ip[SINK], "-p", str(PORT_HIGH), "-t", t,
                                                  "-O", "1", "-J"], stdout=subprocess.PIPE, text=True),
                "low": self.tb.host(LOW).popen(["iperf3", "-c", self.ip[SINK], "-p", str(PORT_LOW), "-t", t,
                                                "-O", "1", "-J", *low_args], stdout=subprocess.PIPE, text=True),
            }
            return {name: iperf3_figures(json.loads(p.communicate()[0])) for name, p in procs.items()}
        finally:
            for p in servers:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)

    def reshape(self):
        """The testbed's own HTB on the bottleneck (a QoS row replaced it)."""
        path = os.path.join(self.tb.run_dir, "bottleneck.tc")
        with open(path, "w") as f:
            f.write("\n".join(shaping.htb_cmds(self.bottleneck, self.link_mbps, QUEUE_PACKETS, self.tb.mtu)) + "\n")
        sh("tc", "-batch", path)

    def match(self, host: str) -> str:
        return f"ip,in_port={self.port[host]}"

    def measure(self, mech: str) -> dict:
        cap_bps = int(self.cap_mbps * 1e6)
        low_args: list[str] = []
        extra: dict = {}
        if mech == "queue":
            link_bps = int(self.link_mbps * 1e6)
            # ovs-vsctl prints the UUIDs of the rows it creates: keep them so
            # that only our own rows are destroyed afterwards.
            rows = sh("ovs-vsctl", "--", "set", "port", self.bottleneck, "qos=@q",
                      "--", "--id=@q", "create", "qos", "type=linux-htb", f"other-config:max-rate={link_bps}",
                      "queues:0=@q0", "queues:1=@q1",
                      "--", "--id=@q0", "create", "queue", f"other-config:max-rate={link_bps}",
                      "--", "--id=@q1", "create", "queue", f"other-config:max-rate={cap_bps}").split()
            self.ofctl("add-flow", self.bridge, f"priority=100,{self.match(HIGH)},actions=set_queue:0,normal")
            self.ofctl("add-flow", self.bridge, f"priority=100,{self.match(LOW)},actions=set_queue:1,normal")
            try:
                figs = self.run_pair(low_args)
                extra["tc_classes"] = sh("tc", "-s", "class", "show", "dev", self.bottleneck)
            finally:
                self.ofctl("del-flows", self.bridge, f"{self.match(HIGH)}")
                self.ofctl("del-flows", self.bridge, f"{self.match(LOW)}")
                sh("ovs-vsctl", "clear", "port", self.bottleneck, "qos", "--", "destroy", "qos", rows[0],
                   "--", "destroy", "queue", *rows[1:])
                self.reshape()
        elif mech == "meter":
            self.ofctl("add-meter", self.bridge, f"meter=1,kbps,band=type=drop,rate={cap_bps // 1000}")
            self.ofctl("add-flow", self.bridge, f"priority=100,{self.match(LOW)},actions=meter:1,normal")
            try:
                figs = self.run_pair(low_args)
                extra["meter_stats"] = self.ofctl("meter-stats", self.bridge)
            finally:
                self.ofctl("del-flows", self.bridge, self.match(LOW))
                self.ofctl("del-meter", self.bridge, "meter=1")
        else:
            if mech == "so_pacing":
                low_args = ["--fq-rate", str(cap_bps)]
            elif mech == "app_pacing":
                low_args = ["-b", str(cap_bps)]
            figs = self.run_pair(low_args)
        out = {"mechanism": mech, "high_mbps": figs["high"]["mbps"], "low_mbps": figs["low"]["mbps"],
               "low_retransmits": figs["low"]["retransmits"], "high_retransmits": figs["high"]["retransmits"]}
        out["enforced"] = mech != "none" and verdict(out["high_mbps"], out["low_mbps"], self.link_mbps,
                                                     self.cap_mbps)
        out.update(extra)
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="per measurement (default 6)")
    ap.add_argument("--cap", type=float, default=0.2, help="low flow's cap, fraction of the link (default 0.2)")
    ap.add_argument("--link-mbps", type=float, default=20.0, help="emulated link rate (default 20)")
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--json", action="store_true", help="also print the raw figures as JSON")
    args = ap.parse_args()
    mechs = args.mechanisms.split(",")
    for m in mechs:
        if m not in MECHANISMS:
            print(f"--mechanisms: expected some of {', '.join(MECHANISMS)}, found {m!r}", file=sys.stderr)
            return 2
    fabric = single_switch(3)
    scale_link = args.link_mbps / (fabric.host_link_gbps(HIGH) * 1000)
    cap_mbps = args.cap * args.link_mbps
    rows = []
    with tempfile.TemporaryDirectory() as d:
        # The machine's shared daemon: the mechanisms are set with its ovs-vsctl and on the root
        # namespace's ports (a run's own daemon has its database and ports elsewhere).
        with Testbed(fabric, d, controller=False, scale_link=scale_link, queue_packets=QUEUE_PACKETS,
                     switch_daemons="shared", log=lambda *_: None) as tb:
            bench = Bench(tb, args.link_mbps, cap_mbps, args.seconds)
            print(f"datapath {tb.datapath}; link {args.link_mbps:g} Mb/s; low flow's cap {cap_mbps:g} Mb/s; "
                  f"{args.seconds:g} s per mechanism")
            print(f"{'mechanism':<12}{'high Mb/s':>10}{'low Mb/s':>10}{'low/cap':>9}{'low retx':>10}"
                  f"{'high retx':>10}  enforced")
            for m in mechs:
                r = bench.measure(m)
                rows.append(r)
                print(f"{m:<12}{r['high_mbps']:>10.2f}{r['low_mbps']:>10.2f}{r['low_mbps'] / cap_mbps:>9.2f}"
                      f"{r['low_retransmits']:>10}{r['high_retransmits']:>10}  {'yes' if r['enforced'] else 'no'}",
                      flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
