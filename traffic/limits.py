"""What a trace may hold, and the number checks every reader of one shares (docs/trace-format.md).

Below traffic.trace and traffic.validate, which both use them: a typo in a trace must answer at
once, not exhaust the machine.
"""
from __future__ import annotations

import math

KINDS = ("compute", "collective", "send", "recv")
MAX_SIZE_BYTES = (1 << 63) - 1  # int64, as Chakra and SimAI store sizes; larger ones overflow float math
MAX_RANKS = 1 << 20
MAX_DISTINCT_OPS = 5_000_000      # ops held in memory: the sum of the class streams' lengths
MAX_ITERATIONS = 100_000
MAX_EXPANDED_OPS = 5_000_000      # a check that must fall back to per-rank ops stops here (~25 s, ~2 GB)


def is_int(x) -> bool:
    """An int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_finite_number(x) -> bool:
    """An int or float, not a bool, that is finite and fits float arithmetic (ints within 64 bits)."""
    if isinstance(x, float):
        return math.isfinite(x)
    return is_int(x) and abs(x) <= MAX_SIZE_BYTES
