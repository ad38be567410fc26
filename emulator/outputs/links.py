"""links.csv: per-link utilization over time, from the switches' port counters.

Once a second during the replay, the sampler reads every switch port's byte
counters and appends one row per directed link:

    t_s,link,src,dst,util,gbps

t_s is real-cluster seconds since the replay start at the end of the
interval; gbps is the interval's rate in real-cluster Gb/s (the emulated
rate divided by scale.link); util is gbps over the link's configured rate.
OpenFlow switches are read with `ovs-ofctl dump-ports` (the controller's
state has only smoothed loads, not counters); the kernel bridges of the
NVLink domains from sysfs.
"""
from __future__ import annotations

import csv
import os
import re
import subprocess
import threading
import time

from emulator.fidelity import read_counters as read_sysfs_counters

COLUMNS = ("t_s", "link", "src", "dst", "util", "gbps")
INTERVAL_S = 1.0

_PORT = re.compile(r'^\s*port\s+("?)([^":]+)\1:\s*rx\s+(.*)$')
_FIELD = re.compile(r"(\w+)=([^,\s]+)")


def parse_dump_ports(text: str) -> dict:
    """`ovs-ofctl dump-ports` text -> {port: (rx_bytes, tx_bytes)}.

    Ports are ints, or names ("LOCAL", or a quoted name when ovs-ofctl
    prints names). A counter the switch does not keep ("?") is None.
    """
    out: dict = {}
    port, rx = None, None
    for line in text.splitlines():
        m = _PORT.match(line)
        if m:
            name = m.group(2).strip()
            port = int(name) if name.isdigit() else name
            rx = _bytes(m.group(3))
            continue
        stripped = line.strip()
        if port is not None and stripped.startswith("tx "):
            out[port] = (rx, _bytes(stripped[3:]))
            port = None
    return out


def _bytes(fields: str) -> int | None:
    value = dict(_FIELD.findall(fields)).get("bytes")
    return int(value) if value is not None and value.isdigit() else None


class LinkSampler:
    """Turns cumulative per-direction byte counters into links.csv rows.

    read_counters() -> {(src, dst): emulated bytes sent so far}; links maps
    (src, dst) -> (link name, configured real-cluster Gb/s). The clock and
    the output file are passed in, so tests drive both.
    """

    def __init__(self, out, read_counters, links: dict, *, scale_link: float, dilation: float, t0: float):
        self.out = out
        self.read = read_counters
        self.links = links
        self.scale_link, self.dilation, self.t0 = scale_link, dilation, t0
        self.writer = csv.writer(out, lineterminator="\n")
        self.writer.writerow(COLUMNS)
        self.prev: dict = {}
        self.prev_t: float | None = None

    def sample(self, now: float) -> list[tuple]:
        """Read the counters at `now`; rows for the interval since the last sample."""
        cur = self.read()
        rows = []
        if self.prev_t is not None and now > self.prev_t:
            dt = now - self.prev_t
            t_s = round((now - self.t0) / self.dilation, 6)
            for key, (name, cap_gbps) in self.links.items():
                a, b = self.prev.get(key), cur.get(key)
                if a is None or b is None or b < a:
                    continue  # no reading, or a counter reset: skip this interval
                gbps = (b - a) * 8 / dt / 1e9 / self.scale_link
                rows.append((t_s, name, key[0], key[1], round(gbps / cap_gbps, 6), round(gbps, 6)))
        self.writer.writerows(rows)
        self.out.flush()
        self.prev, self.prev_t = cur, now
        return rows

    def close(self) -> None:
        self.out.close()


class SamplerThread:
    """Calls sampler.sample(time.time()) every interval_s; stop() takes a last
    sample and closes. A failing read stops sampling, never the run."""

    def __init__(self, sampler: LinkSampler, interval_s: float = INTERVAL_S, log=print):
        self.sampler, self.interval_s, self.log = sampler, interval_s, log
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._failed = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="links.csv")

    def start(self):
        """Returns at once: the baseline read happens in the thread, so a slow
        switch never delays the agents' start."""
        self._thread.start()
        return self

    def _sample(self):
        with self._lock:
            if self._failed:
                return
            try:
                self.sampler.sample(time.time())
            except Exception as e:  # noqa: BLE001: an output must never fail the run
                self._failed = True
                self.log(f"[run] warning: links.csv sampling stopped: {e}")

    def _loop(self):
        self._sample()
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self):
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._sample()
        self.sampler.close()


def directed_links(fabric) -> dict:
    """(src, dst) -> (link name, link_gbps) for both directions of every link."""
    out = {}
    for a, b, d in fabric.links():
        out[a, b] = out[b, a] = (f"{a}-{b}", d["link_gbps"])
    return out


def counter_reader(fabric, bridge, intf, run=None, read_sysfs=read_sysfs_counters):
    """read() -> {(src, dst): bytes} from every switch's ports.

    A switch's tx counter on a port gives switch -> peer; on a host port its
    rx counter gives host -> switch (hosts are not read). bridge(switch) is
    the OVS bridge name, intf(node, peer) the root-namespace device;
    run(argv) -> stdout and read_sysfs(devs) -> {dev: (tx, rx)} do the I/O.
    """
    run = run or _run
    ovs, kernel = [], []
    for s in fabric.switches:
        (ovs if fabric.node(s)["openflow"] else kernel).append(s)
    ports = {s: {fabric.port(s, p): p for p in fabric.graph.neighbors(s)} for s in ovs}
    devs = {intf(s, p): (s, p) for s in kernel for p in fabric.graph.neighbors(s)}

    def add(out, s, peer, tx, rx):
        if tx is not None:
            out[s, peer] = tx
        if rx is not None and fabric.node(peer)["role"] == "host":
            out[peer, s] = rx

    def read() -> dict:
        out: dict = {}
        for s in ovs:
            text = run(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", "dump-ports", bridge(s)])
            for port, (rx, tx) in parse_dump_ports(text).items():
                if port in ports[s]:
                    add(out, s, ports[s][port], tx, rx)
        for dev, (tx, rx) in read_sysfs(list(devs)).items():
            add(out, *devs[dev], tx, rx)
        return out

    return read


def _run(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=2)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()[:200]}")
    return r.stdout


def start(tb, out_dir: str, scale_link: float, dilation: float, t0: float, log=print) -> SamplerThread | None:
    """Sample the testbed's links into out_dir/links.csv each second until stop().
    None (and a warning) when sampling cannot start: the run goes on without it."""
    try:
        read = counter_reader(tb.fabric, tb.mn_name, tb.intf)
        out = open(os.path.join(out_dir, "links.csv"), "w")
        sampler = LinkSampler(out, read, directed_links(tb.fabric), scale_link=scale_link, dilation=dilation, t0=t0)
    except Exception as e:  # noqa: BLE001: an output must never fail the run
        log(f"[run] warning: no links.csv: {type(e).__name__}: {e}")
        return None
    return SamplerThread(sampler, log=log).start()


def read_csv(path: str) -> list[dict]:
    """links.csv rows with numbers as floats; raises ValueError on a bad header."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"expected the columns {','.join(COLUMNS)}, found {reader.fieldnames}")
        return [{**r, "t_s": float(r["t_s"]), "util": float(r["util"]), "gbps": float(r["gbps"])} for r in reader]


def summarize(rows: list[dict], top: int = 10) -> list[dict]:
    """The busiest directed links that carried traffic: mean and peak utilization over the samples."""
    per: dict = {}
    for r in rows:
        per.setdefault((r["link"], r["src"], r["dst"]), []).append(r["util"])
    stats = [{"link": k[0], "src": k[1], "dst": k[2], "mean_util": sum(v) / len(v), "peak_util": max(v),
              "samples": len(v)} for k, v in per.items() if max(v) > 0]
    stats.sort(key=lambda s: (-s["mean_util"], s["src"], s["dst"]))
    return stats[:top]
