"""The emulator's link counter sampler: links.csv from the switches' port counters.

Every quarter second during the replay it reads every switch port's byte counters
and hands them to experiment.outputs.links.LinkSampler. Every switch port,
OVS or kernel bridge, is a device in the root namespace (on the AF_XDP
datapath a switch-to-switch port is the veth into the link namespace), so
one read of /proc/net/dev gives every counter. (Spawning `ovs-ofctl
dump-ports` per switch cost 7% of a core on a fat-tree k=4; the
controller's state has only smoothed loads.)
"""
from __future__ import annotations

import threading
import time

from badinput.paths import open_out
from emulator.run.fidelity import LINK_SAMPLE_S
from emulator.run.fidelity import read_counters as read_dev_counters
from experiment.outputs.links import LinkSampler, directed_links

INTERVAL_S = LINK_SAMPLE_S  # one read of /proc/net/dev: ~60 us for 120 devices


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
    """Sample the testbed's links into out_dir/links.csv every INTERVAL_S until stop().
    None (and a warning) when sampling cannot start: the run goes on without it."""
    try:
        paths = tuple(tb.net_dev_paths())
        read = counter_reader(tb.fabric, tb.intf, lambda devs: read_dev_counters(devs, paths))
        out = open_out(out_dir, "links.csv")
        sampler = LinkSampler(out, read, directed_links(tb.fabric), scale_link=scale_link, dilation=dilation, t0=t0)
    except Exception as e:  # noqa: BLE001: an output must never fail the run
        log(f"[run] warning: no links.csv: {type(e).__name__}: {e}")
        return None
    return SamplerThread(sampler, log=log).start()
