"""links.csv: per-link utilization over time, from the switches' port counters.

Once a second during the replay, the sampler reads every switch port's byte
counters and appends one row per directed link:

    t_s,link,src,dst,util,gbps

t_s is real-cluster seconds since the replay start at the end of the
interval; gbps is the interval's rate in real-cluster Gb/s (the emulated
rate divided by scale.link); util is gbps over the link's configured rate.
Every switch port, OVS or kernel bridge, is a device in the root namespace
(on the AF_XDP datapath a switch-to-switch port is the veth into the link
namespace), so one read of /proc/net/dev gives every counter. (Spawning
`ovs-ofctl dump-ports` per switch cost 7% of a core on a fat-tree k=4; the
controller's state has only smoothed loads.)
"""
from __future__ import annotations

import csv
import os
import threading
import time

from emulator.fidelity import read_counters as read_dev_counters

COLUMNS = ("t_s", "link", "src", "dst", "util", "gbps")
INTERVAL_S = 1.0


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


def counter_reader(fabric, intf, read_devs=read_dev_counters):
    """read() -> {(src, dst): bytes} from every switch's ports.

    A switch's tx counter on a port gives switch -> peer; on a host port its
    rx counter gives host -> switch (hosts are not read). intf(node, peer)
    names the root-namespace device; read_devs(devs) -> {dev: (tx, rx)} does
    the I/O.
    """
    devs = {intf(s, p): (s, p) for s in fabric.switches for p in fabric.graph.neighbors(s)}
    hosts = {n for n in fabric.graph if fabric.node(n)["role"] == "host"}

    def read() -> dict:
        out: dict = {}
        for dev, (tx, rx) in read_devs(list(devs)).items():
            s, peer = devs[dev]
            out[s, peer] = tx
            if peer in hosts:
                out[peer, s] = rx
        return out

    return read


def start(tb, out_dir: str, scale_link: float, dilation: float, t0: float, log=print) -> SamplerThread | None:
    """Sample the testbed's links into out_dir/links.csv each second until stop().
    None (and a warning) when sampling cannot start: the run goes on without it."""
    try:
        read = counter_reader(tb.fabric, tb.intf)
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
