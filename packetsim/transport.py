"""The transport the packet engine runs: the one place that reads the experiment's settings.

Until the engine-neutral `transport:` section is in the experiment model, every run gets its
defaults (the same key names); `settings` then reads `exp.transport` instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CCS = ("newreno", "cubic", "dctcp", "bbr")


@dataclass(frozen=True)
class Ecn:
    min_bytes: int
    max_bytes: int
    max_prob: float


@dataclass(frozen=True)
class Transport:
    cc: str = "cubic"
    mtu_bytes: int = 9000
    switch_buffer_bytes: int = 4 << 20  # per output port: a few MiB, as shallow-buffer datacenter switches
    ecn: Ecn | None = None
    latency_us: dict = field(default_factory=dict)  # link kind (host, fabric, nvlink) -> one-way us
    spray: bool = False


def settings(exp) -> Transport:
    """The experiment's transport, or the defaults; a link kind without latency gets
    topology.latency_us (host and fabric links, as the other engines delay them)."""
    t = getattr(exp, "transport", None)
    lat = {"host": exp.latency_us, "fabric": exp.latency_us, "nvlink": 0.0}
    if t is None:
        return Transport(latency_us=lat)
    ecn = getattr(t, "ecn", None)
    return Transport(cc=t.tcp.cc if hasattr(t, "tcp") else t.cc, mtu_bytes=t.mtu_bytes,
                     switch_buffer_bytes=t.switch_buffer_bytes,
                     ecn=Ecn(ecn.min_bytes, ecn.max_bytes, ecn.max_prob) if ecn else None,
                     latency_us={**lat, **dict(getattr(t, "latency_us", None) or {})},
                     spray=bool(getattr(t, "spray", False)))
