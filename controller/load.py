"""Per-link load from port counters: an EWMA of counter deltas, in real-cluster Gb/s.

The switches count emulated bytes; ``link_scale`` (emulated rate = real rate x
link_scale) turns measured rates back into the fabric's units, so loads
compare directly with ``link_gbps``.
"""
from __future__ import annotations

import math

from topologies.fabric import Fabric


class LinkLoad:
    """Load of every directed link (from, to), observed at switch ports.

    A switch port's tx counter gives switch -> peer; on a host port its rx
    counter gives host -> switch (hosts are not polled).
    """

    def __init__(self, fabric: Fabric, link_scale: float = 1.0, tau_s: float = 1.0):
        if not link_scale > 0:
            raise ValueError(f"link_scale: expected a positive factor, found {link_scale!r}")
        if not tau_s > 0:
            raise ValueError(f"tau_s: expected a positive time constant, found {tau_s!r}")
        self.fabric = fabric
        self.link_scale = link_scale
        self.tau_s = tau_s
        self.capacity_gbps: dict[tuple[str, str], float] = {}
        self._peer: dict[tuple[str, int], str] = {}
        for a, b, d in fabric.graph.edges(data=True):
            if d["kind"] == "nvlink":
                continue  # not OpenFlow-steered
            self.capacity_gbps[a, b] = self.capacity_gbps[b, a] = d["link_gbps"]
            self._peer[a, d["ports"][a]] = b
            self._peer[b, d["ports"][b]] = a
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # link -> (time_s, bytes)
        self.load_gbps: dict[tuple[str, str], float] = {}
        self.updated_at_s: dict[tuple[str, str], float] = {}
        self.version = 0  # changes whenever a load does, so policies may cache what they derive

    def peer(self, switch: str, port: int) -> str | None:
        return self._peer.get((switch, port))

    def observe(self, switch: str, port: int, tx_bytes: int, rx_bytes: int, now: float) -> None:
        peer = self._peer.get((switch, port))
        if peer is None:
            return  # local or unknown port
        self._count((switch, peer), tx_bytes, now)
        if self.fabric.node(peer)["role"] == "host":
            self._count((peer, switch), rx_bytes, now)

    def _count(self, link: tuple[str, str], nbytes: int, now: float) -> None:
        last = self._last.get(link)
        self._last[link] = (now, nbytes)
        if last is None or now <= last[0] or nbytes < last[1]:
            return  # first sample, clock not moving, or counter reset: rebaseline
        dt = now - last[0]
        rate = (nbytes - last[1]) * 8 / dt / 1e9 / self.link_scale
        # alpha from the elapsed time, so an irregular poll period weighs right.
        alpha = 1.0 - math.exp(-dt / self.tau_s)
        prev = self.load_gbps.get(link)
        self.load_gbps[link] = rate if prev is None else prev + alpha * (rate - prev)
        self.updated_at_s[link] = now
        self.version += 1

    def load(self, a: str, b: str) -> float:
        return self.load_gbps.get((a, b), 0.0)

    def utilization(self, a: str, b: str) -> float:
        return self.load(a, b) / self.capacity_gbps[a, b]

    def nonzero(self):
        """((a, b), Gb/s) of every link with a load."""
        return self.load_gbps.items()

    def snapshot(self, min_gbps: float = 0.0) -> list[dict]:
        return [{"from": a, "to": b, "load_gbps": round(v, 6),
                 "utilization": round(v / self.capacity_gbps[a, b], 6)}
                for (a, b), v in sorted(self.load_gbps.items()) if v >= min_gbps]
