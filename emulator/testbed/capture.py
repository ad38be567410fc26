"""Packet capture during the replay: one tcpdump per listed link, on the
link's switch-side interface (in the root namespace), writing
DIR/pcap/<a>-<b>.pcap that opens in Wireshark.

tcpdump starts before the agents' go and is known to be listening before
the run goes on (it says so on stderr); it stops by itself after
``max_packets``, or at the end of the replay (SIGTERM to its PID, then a
wait), also when the run fails. Both directions of the link are captured,
``snaplen`` bytes of each packet (headers), with the packet's full length
kept in the file.
"""
from __future__ import annotations

import os
import re
import select
import subprocess
import time

from badinput.paths import inside
from emulator.testbed.process import TestbedError, stop_process

PCAP_DIR = "pcap"
LISTEN_TIMEOUT_S = 10.0


def plan(links, fabric, intf, out_dir: str, max_packets: int, snaplen: int, in_netns=None) -> list[dict]:
    """The capture of each link: its interface, file and tcpdump command (pure). in_netns(node,
    argv): argv run where that switch's ports live (the run's own switch daemons' namespaces)."""
    out = []
    for a, b in links:
        # A host's side lives in its namespace; the switch side in the root one (or its daemon's).
        node, peer = (b, a) if fabric.node(a)["role"] == "host" else (a, b)
        dev = intf(node, peer)
        path = inside(out_dir, PCAP_DIR, f"{a}-{b}.pcap")
        cmd = ["tcpdump", "-i", dev, "-w", path, "-s", str(snaplen), "-c", str(max_packets),
               "-n", "-U", "--immediate-mode", "-Z", "root"]
        out.append({"link": f"{a}-{b}", "interface": dev, "path": path,
                    "cmd": in_netns(node, cmd) if in_netns else cmd})
    return out


_STAT = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)", re.M)


def parse_stats(stderr: str) -> dict:
    """tcpdump's closing counts: {'captured': N, 'received_by_filter': N, 'dropped_by_kernel': N}."""
    return {what.replace(" ", "_"): int(n) for n, what in _STAT.findall(stderr)}


class Captures:
    """The running tcpdumps of one run."""

    def __init__(self, plans: list[dict], max_packets: int, log=print):
        self.plans, self.max_packets, self.log = plans, max_packets, log
        self.procs: list[subprocess.Popen] = []
        self.results: list[dict] = []

    def start(self, add_pid=None) -> "Captures":
        if self.plans:
            os.makedirs(os.path.dirname(self.plans[0]["path"]), exist_ok=True)
        for p in self.plans:
            # Own session: a Ctrl-C at the terminal reaches dtnet, which stops tcpdump itself.
            proc = subprocess.Popen(p["cmd"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            self.procs.append(proc)
            if add_pid:
                add_pid(f"capture/{p['link']}", proc.pid)
            self._wait_listening(proc, p)
        if self.plans:
            self.log(f"[run] capturing {len(self.plans)} link(s) into {os.path.dirname(self.plans[0]['path'])}/")
        return self

    def _wait_listening(self, proc, p):
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        seen = b""
        while b"listening on" not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestbedError(f"tcpdump on {p['interface']} ({p['link']}) not listening after "
                                   f"{LISTEN_TIMEOUT_S:.0f}s: {seen.decode(errors='replace').strip()[:200]}")
            ready, _, _ = select.select([proc.stderr], [], [], left)
            chunk = os.read(proc.stderr.fileno(), 4096) if ready else b""
            if ready and not chunk:
                proc.wait(5)
                raise TestbedError(f"tcpdump on {p['interface']} ({p['link']}) exited with status "
                                   f"{proc.returncode}: {seen.decode(errors='replace').strip()[:200]}")
            seen += chunk

    def stop(self) -> list[dict]:
        """SIGTERM every tcpdump still running, wait, and record what each captured."""
        for p, proc in zip(self.plans, self.procs):
            stop_process(proc, timeout_s=5.0)
            stats = parse_stats(proc.stderr.read().decode(errors="replace"))
            proc.stderr.close()
            self.results.append({"link": p["link"], "interface": p["interface"],
                                 "file": os.path.join(PCAP_DIR, os.path.basename(p["path"])),
                                 "packets": stats.get("captured"),
                                 "dropped_by_kernel": stats.get("dropped_by_kernel"),
                                 "limit_reached": stats.get("captured", 0) >= self.max_packets})
        self.procs = []
        return self.results


def start(exp, tb, out_dir: str, log=print) -> Captures | None:
    """Start the experiment's captures on a running testbed; None when it asks for none."""
    cap = exp.capture
    if not cap.links:
        return None
    plans = plan(cap.links, tb.fabric, tb.intf, out_dir, cap.max_packets, cap.snaplen, tb.in_netns_argv)
    captures = Captures(plans, cap.max_packets, log)
    try:
        return captures.start(tb.state.add_pid)
    except BaseException:
        captures.stop()
        raise
