"""The range every number a user gives may take: what a real cluster can have, said once.

Bounds are wide (a real value is never near them) but finite: 1e300 ms of compute, a start
in years, a poll period of 1e-300 s or a denormal scale passes a type check and then hangs an
engine or overflows its arithmetic. Every reader of a number (experiment files, --set,
traces, fabric files, REST announcements) checks it against one of these.
"""
from __future__ import annotations

import math

from badinput import InputError


class Range:
    """lo..hi in a unit; lo_open: lo itself is not allowed (a rate or a scale of 0)."""

    __slots__ = ("lo", "hi", "unit", "lo_open", "why")

    def __init__(self, lo, hi, unit: str, why: str, lo_open: bool = False):
        self.lo, self.hi, self.unit, self.lo_open, self.why = lo, hi, unit, lo_open, why

    @property
    def expected(self) -> str:
        if self.lo_open:
            return f"{self.unit} > {self.lo:g} and <= {self.hi:g}"
        return f"{self.unit} in {self.lo:g}..{self.hi:g}"

    def ok(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if isinstance(v, int) and abs(v) > 1 << 64:  # compared as it is: no float overflow
            return False
        return math.isfinite(v) and (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi

    def check(self, v, key: str, file=None):
        """v when it is in range, else the InputError naming key."""
        if not self.ok(v):
            raise InputError(key, self.expected, v, file)
        return v


DAY_S = 86_400.0
# Link rates: below 1 Mb/s is no datacenter link; above 100 Tb/s is beyond any NIC or NVLink
# (NVLink 5 is 14,400 Gb/s per GPU).
LINK_GBPS = Range(1e-3, 1e5, "Gb/s", "slower than 1 Mb/s or faster than 100 Tb/s", lo_open=False)
# Times from the start of a replay (a job's start, a fault, a controller's down time): one
# day of simulated time is far beyond any experiment.
AT_MS = Range(0, DAY_S * 1e3, "milliseconds", "within one day of the replay's start")
# One compute phase of a rank: an hour without communicating is no training step.
COMPUTE_MS = Range(0, 3600e3, "milliseconds", "one compute phase of at most an hour")
COMPUTE_S = Range(0, 3600.0, "seconds", "one compute phase of at most an hour")
# scale: factors that shrink real rates and bytes. Below 1e-9 a 400 Gb/s link is 0.4 b/s.
SCALE = Range(1e-9, 1.0, "a factor", "no shrinking below 1e-9", lo_open=False)
# Controller polls and timers: 1 ms is the finest a controller reads counters; an hour the
# coarsest that still observes an experiment.
POLL_S = Range(1e-3, 3600.0, "seconds", "a statistics poll between 1 ms and an hour")
# Wall-clock waits of the emulator (timeouts): a week is the longest a run may wait.
WAIT_S = Range(0, 7 * DAY_S, "seconds", "a wait of at most a week", lo_open=True)
# Announced phase periods (REST): a training iteration of 1 us .. 1 hour.
PERIOD_S = Range(1e-6, 3600.0, "seconds", "an iteration period between 1 us and an hour")
# The whole run: simulated real-cluster time, estimated before anything is built.
MAX_RUN_S = 30 * DAY_S


def check_run_s(least_s: float, key: str, file=None) -> None:
    """Refuse a run whose simulated time is at least least_s beyond MAX_RUN_S: each field may be
    in range and their product (iterations x compute) still be years."""
    if least_s > MAX_RUN_S:
        raise InputError(key, f"a run of at most {MAX_RUN_S / DAY_S:g} days of simulated time",
                         f"at least {least_s / DAY_S:.3g} days", file)
