"""Timeouts where first windows overflow a port's buffer (flow.losses: timeouts).

A fluid model has no queues, and what it misses most for that is TCP incast: connections that
start at once into one port each send their first window at their sender's rate, and the port
drains at its own. When the queue this builds passes the port's buffer, drop-tail loses
segments of every connection in the burst (they arrive interleaved), and a connection whose
share of the buffer is under DupThresh + 1 segments cannot have three segments delivered past
its loss, so no fast retransmit: it waits for its retransmission timer (Linux's minimum, 200
ms). A larger share repairs its losses within a round trip, which the model leaves out.

What the model does, once per transfer, at the first solve that gives it a rate while its
connection was idle (so a stream of back-to-back transfers is one burst):
- its first window is min(10 segments, its size) in frames on the wire, sent at its sender's
  share of its NIC (and never above its path's slowest link);
- at every link of its path after the first (its own host queues nothing: Linux's TCP Small
  Queues) and not NVLink, the connections starting there together fill a queue that drains at
  the link's rate less what the flows already on it use; `peak_queue_bytes` is its highest;
- if that passes the port's buffer and (buffer + the link's bandwidth-delay product) / n is
  under (DupThresh + 1) frames, every one of the n transfers is delivered rto_s later.

The constants are TCP's (initial window, DupThresh, minimum RTO), none fitted to a point.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DUPTHRESH = 3               # segments past a loss that set off a fast retransmit (RFC 5681, 6675)
RTO_MIN_S = 0.2             # Linux's minimum retransmission timeout (TCP_RTO_MIN)
LOSS_MODELS = ("none", "timeouts")


@dataclass(frozen=True)
class BurstLosses:
    """buffer_bytes: every switch output port's (and a receiving host's) drop-tail buffer.
    frame_bytes: a full segment on the wire (the MTU); mss_bytes: its payload."""

    buffer_bytes: float
    frame_bytes: float
    mss_bytes: float
    initial_segments: int = 10
    rto_s: float = RTO_MIN_S
    dupthresh: int = DUPTHRESH

    def __post_init__(self):
        if not self.buffer_bytes > 0:
            raise ValueError(f"buffer_bytes: expected > 0, found {self.buffer_bytes!r}")
        if not 0 < self.mss_bytes <= self.frame_bytes:
            raise ValueError(f"mss_bytes: expected in (0, frame_bytes], found {self.mss_bytes!r}")
        if not (self.initial_segments >= 1 and self.rto_s >= 0 and self.dupthresh >= 1):
            raise ValueError(f"initial_segments >= 1, rto_s >= 0, dupthresh >= 1: found {self.initial_segments!r}, "
                             f"{self.rto_s!r}, {self.dupthresh!r}")

    def first_window_wire_bytes(self, size_bytes: np.ndarray) -> np.ndarray:
        """A transfer's first window on the wire: min(initial window, its size) with headers."""
        payload = np.minimum(np.asarray(size_bytes, float), self.initial_segments * self.mss_bytes)
        return payload * (self.frame_bytes / self.mss_bytes)

    def times_out(self, n: int, bdp_bytes: float = 0.0) -> bool:
        """Whether n connections that overflow a port each keep too few segments in it to be
        repaired by a fast retransmit."""
        return (self.buffer_bytes + bdp_bytes) / n < (self.dupthresh + 1) * self.frame_bytes


def peak_queue_bytes(window_bytes, send_Bps, drain_Bps: float) -> float:
    """The highest a port's queue gets when each connection i sends window_bytes[i] at send_Bps[i]
    from time 0 and the port drains at drain_Bps. Arrivals less drain are concave and piecewise
    linear in time, so the peak is at 0 or at a connection's last byte."""
    w = np.asarray(window_bytes, float)
    a = np.asarray(send_Bps, float)
    keep = (w > 0) & (a > 0)
    w, a = w[keep], a[keep]
    if not len(w) or a.sum() <= drain_Bps:
        return 0.0
    tau = w / a
    order = np.argsort(tau, kind="stable")
    tau, w, a = tau[order], w[order], a[order]
    done = np.cumsum(w)                         # bytes of the connections finished by tau[k]
    still = a.sum() - np.cumsum(a)              # rate of those still sending after tau[k]
    arrived = done + still * tau                # all bytes arrived by tau[k]
    return float(max(0.0, (arrived - drain_Bps * tau).max()))
