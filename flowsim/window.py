"""TCP's congestion window as the flow engine models it (flow.window_growth): a connection keeps
at most cwnd bytes in flight, the bytes it sent in the last round trip, and cwnd grows with the
bytes acknowledged, as ns-3's Cubic (the packet engine's) does at datacenter round trips.

What the packet engine showed (docs/flow-engine.md, "Window growth"): cwnd starts at 10 segments,
grows by the bytes acked (slow start, byte counting) until HyStart ends slow start at its low
window of 16 segments (its ACK train outlasts the microsecond minimum RTT at once), then grows one
segment per 20 segments acked (Cubic's growth with no loss yet: its count clamped at 20). It
never restarts after an idle period (ns-3 3.37 has no CA_EVENT_CWND_RESTART).

A fluid sliding window: in flight = sent(now) - sent(now - RTT) (an ACK returns an RTT after its
byte left); a connection whose window is full sends at the rate its ACKs return times
(1 + dcwnd/dacked), one that is not may send at any rate. Rates are constant between solves, so
the history is a list of breakpoints, and a breakpoint passing one RTT (its ACKs' rate changes)
is an event.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

INITIAL_SEGMENTS = 10       # ns-3's and Linux's initial window (TcpSocket::InitialCwnd, RFC 6928)
HYSTART_LOW_SEGMENTS = 16   # HyStart acts from this window on (HyStartLowWindow, hystart_low_window)
CUBIC_CNT_CLAMP = 20        # segments acked per segment of growth before the first loss (Cubic's cnt clamp)
GROWTHS = ("none", "cubic", "slow-start")
FULL_TOL_BYTES = 1.0        # a window this close to full is full (float sums of rate x time)


class CwndLaw:
    """cwnd as a function of the bytes a connection had acknowledged: slow start from the initial
    window (one byte of window per byte acked), then, for cubic, one per CUBIC_CNT_CLAMP from
    HyStart's low window on; never above max_bytes (a receive or NCCL buffer; None: no bound)."""

    def __init__(self, growth: str, mss_bytes: float, max_bytes: float | None = None):
        if growth not in GROWTHS[1:]:
            raise ValueError(f"growth: expected one of {', '.join(GROWTHS[1:])}, found {growth!r}")
        if not mss_bytes > 0:
            raise ValueError(f"mss_bytes: expected > 0, found {mss_bytes!r}")
        self.growth, self.mss = growth, float(mss_bytes)
        self.initial = INITIAL_SEGMENTS * self.mss
        # bytes acked at which slow start ends (infinite for slow-start: the path's BDP bounds it)
        self.ss_acked = (HYSTART_LOW_SEGMENTS * self.mss - self.initial) if growth == "cubic" else math.inf
        self.max_bytes = math.inf if max_bytes is None else float(max_bytes)

    def cwnd(self, acked):
        a = np.asarray(acked, float)
        ss = self.initial + np.minimum(a, self.ss_acked)
        ca = np.maximum(a - self.ss_acked, 0.0) / CUBIC_CNT_CLAMP if math.isfinite(self.ss_acked) else 0.0
        return np.minimum(ss + ca, self.max_bytes)

    def slope(self, acked):
        """d cwnd / d acked."""
        a = np.asarray(acked, float)
        s = np.where(a < self.ss_acked, 1.0, 1.0 / CUBIC_CNT_CLAMP)
        return np.where(self.cwnd(a) >= self.max_bytes, 0.0, s)

    def kinks(self) -> list[float]:
        """Bytes acked where the slope changes."""
        out = [self.ss_acked] if math.isfinite(self.ss_acked) else []
        if math.isfinite(self.max_bytes):  # the inverse of cwnd at max_bytes
            reach = self.max_bytes - self.initial
            out.append(reach if reach <= self.ss_acked else self.ss_acked + (reach - self.ss_acked) * CUBIC_CNT_CLAMP)
        return sorted(x for x in out if x > 0)


class SlidingWindows:
    """Each tracked connection's sending history over its last RTT, its window cap at a solve,
    and the next window event. A connection is tracked while its window can bind: cwnd below its
    path's bottleneck rate x RTT (the bytes the path can hold; cwnd only grows, so once above,
    never again until a reroute); at zero RTT never."""

    def __init__(self, law: CwndLaw):
        self.law = law
        self.hist: dict[int, tuple[list, list, list]] = {}  # conn -> (times, bytes sent then, rate after)
        self.rtt: dict[int, float] = {}
        self.bdp: dict[int, float] = {}
        self.done = np.zeros(0, bool)  # per connection: its window binds no more (until a reroute)
        self.next_s = math.inf              # the next window event, absolute time (set by record)

    def reset(self, c: int):
        """Forget what was decided about c: its path, so its RTT and bottleneck, changed (its
        history too: it starts again from what it sent, all of it taken as acknowledged)."""
        if c < len(self.done):
            self.done[c] = False
        self.hist.pop(c, None)
        self.rtt.pop(c, None)
        self.bdp.pop(c, None)

    @staticmethod
    def _eps(now: float) -> float:
        return now * 1e-12 + 1e-15  # what the event loop counts as now

    def _sent_at(self, c: int, t: float) -> tuple[float, float]:
        """(bytes c had sent by t, its rate at t), from its history."""
        ts, xs, rs = self.hist[c]
        k = bisect.bisect_right(ts, t) - 1
        if k < 0:
            return xs[0], 0.0
        return xs[k] + rs[k] * (t - ts[k]), rs[k]

    def state(self, c: int, now: float) -> tuple[float, float, float, float, float]:
        """(acked, in flight, cwnd, ACK rate, d cwnd / d acked) of a tracked connection at now:
        what it sent up to one RTT ago is acknowledged."""
        sent, _ = self._sent_at(c, now)
        acked, r_ack = self._sent_at(c, now - self.rtt[c] + self._eps(now))
        return acked, sent - acked, float(self.law.cwnd(acked)), r_ack, float(self.law.slope(acked))

    def caps(self, now: float, conns: np.ndarray, sent: np.ndarray, path_info) -> np.ndarray:
        """Window cap of each connection of a solve: where its window is full, the rate that keeps
        it full (ACK rate x (1 + slope)); elsewhere inf. sent: each one's bytes so far;
        path_info(c) -> (RTT s, bottleneck B/s), asked once per connection and path."""
        out = np.full(len(conns), np.inf)
        if len(conns) and conns.max() >= len(self.done):
            self.done = np.concatenate([self.done, np.zeros(conns.max() + 1 - len(self.done), bool)])
        for k in np.flatnonzero(~self.done[conns]).tolist():  # vectorized: most connections are done
            c = int(conns[k])
            if c not in self.rtt:
                rtt, bottleneck = path_info(c)
                self.rtt[c], self.bdp[c] = rtt, rtt * bottleneck
                if not rtt > 0:
                    self.done[c] = True
                    continue
            if c not in self.hist:
                self.hist[c] = ([now], [float(sent[k])], [0.0])
            acked, inflight, w, r_ack, slope = self.state(c, now)
            if w >= self.bdp[c]:  # cwnd only grows: the path binds before the window again
                self.done[c] = True
                del self.hist[c]
                continue
            if inflight >= w - FULL_TOL_BYTES:
                out[k] = r_ack * (1.0 + slope)
        return out

    def record(self, now: float, rate: np.ndarray):
        """After every solve: each tracked connection's rate from now on (rate: over all
        connections), history older than one RTT dropped; then the next window event."""
        for c, (ts, xs, rs) in self.hist.items():
            r = float(rate[c]) if c < len(rate) else 0.0
            if rs[-1] != r:
                x, _ = self._sent_at(c, now)
                if ts[-1] == now:
                    rs[-1] = r
                else:
                    ts.append(now)
                    xs.append(x)
                    rs.append(r)
            k = bisect.bisect_right(ts, now - self.rtt[c]) - 1
            if k > 0:
                del ts[:k], xs[:k], rs[:k]
        self.next_s = self._next_event(now)

    def _next_event(self, now: float) -> float:
        """The earliest time a tracked connection's cap changes: a breakpoint of its history turns
        one RTT old (its ACK rate changes), its window fills, or its acked bytes reach a kink of
        the law."""
        t = math.inf
        eps = self._eps(now)
        for c, (ts, xs, rs) in self.hist.items():
            rtt = self.rtt[c]
            k = bisect.bisect_right(ts, now - rtt + eps)
            if k < len(ts):
                t = min(t, ts[k] + rtt)
            acked, inflight, w, r_ack, slope = self.state(c, now)
            if inflight < w - FULL_TOL_BYTES:
                grow = rs[-1] - r_ack * (1.0 + slope)
                if grow > 0:
                    t = min(t, now + (w - inflight) / grow)
            elif r_ack > 0:
                ahead = [x for x in self.law.kinks() if x > acked + FULL_TOL_BYTES]
                if ahead:
                    t = min(t, now + (ahead[0] - acked) / r_ack)
        return t
