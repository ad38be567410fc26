"""The agent's half of co-scheduling: the gates that hold a phase until the
runner's answer (or the wait running out), and the pacer.

Pure: the agent passes the time.
"""
from __future__ import annotations

from emulator.agent.protocol import Announce, PhaseAnswer
from experiment.rankplan import Phases


class TokenBucket:
    """Paces bytes to rate_bytes_s with bursts of at most burst_bytes; the
    caller passes the time and sleeps what reserve() returns."""

    def __init__(self, rate_bytes_s: float, burst_bytes: int, now: float):
        self.rate, self.burst = rate_bytes_s, burst_bytes
        self.tokens, self.last = float(burst_bytes), now

    def reserve(self, nbytes: int, now: float) -> float:
        """Take nbytes now; seconds to wait before sending them."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class PhaseGates:
    """Which iterations' communication waits for the controller, and until when.

    Pure: the agent passes the time. ``check`` is called when a communication
    op of a gated iteration is ready; the first call marks the phase ready and,
    on the announcing rank, returns the announcement to send.
    """

    def __init__(self, spec: Phases):
        self.gated = set(spec.iterations)
        self.bodies = {a.iteration: a.body for a in spec.announce}
        self.wait_s = spec.answer_wait_s
        self.ready_at: dict[int, float] = {}
        self.answers: dict[int, tuple[PhaseAnswer, float]] = {}  # iteration -> (answer, received at)
        self.opened: dict[int, float] = {}  # iteration -> when this rank's phase began

    def answer(self, ans: PhaseAnswer, now: float) -> None:
        self.answers.setdefault(ans.iteration, (ans, now))

    def open_at(self, it: int) -> float:
        """When the gate opens: the answer's start, or the wait running out."""
        if it in self.answers:
            ans, got = self.answers[it]
            return max(ans.start_at, got)
        return self.ready_at[it] + self.wait_s

    def check(self, it: int, now: float) -> tuple[float, Announce | None]:
        """(when the gate of iteration `it` opens, the announcement to send now or None)."""
        request = None
        if it not in self.ready_at:
            self.ready_at[it] = now
            if it in self.bodies:
                request = Announce(it, now, dict(self.bodies[it], period_s=self.period_s(it, now)))
        return self.open_at(it), request

    def period_s(self, it: int, now: float) -> float:
        """The period to announce: measured from the last phase this rank began
        (the gate's own wait left out), else the plan's estimate."""
        before = [j for j in self.opened if j < it]
        if before:
            j = max(before)
            return max(1e-6, (now - self.opened[j]) / (it - j))
        return self.bodies[it]["period_s"]

    def begin(self, it: int, now: float) -> dict | None:
        """The phase of `it` begins at this rank: its offset event, once."""
        if it in self.opened:
            return None
        self.opened[it] = now
        ans = self.answers.get(it, (None, None))[0]
        return {"kind": "offset", "iteration": it, "start": self.ready_at[it], "end": now,
                "delay_emulated_s": ans.delay_s if ans else 0.0,
                "status": ans.status if ans else "no answer", "pace_mbps": ans.pace_mbps if ans else None}
