"""The run's watchdog: from the agents' beats and lines, when a run must end and why."""
from __future__ import annotations

import signal


class Watchdog:
    """Decides, from the agents' beats and lines, when a run must end and why.

    An agent that dies, stops beating, or reports an error fails the run; so
    does a job none of whose ranks moved a byte, finished an op or was busy
    (computing, waiting to start or on a gate) for stall_s. After the first
    failure it waits GRACE_S for more, so that a rank's death, not its peers'
    broken connections, is named first. Pure: the runner passes the time.
    """
    GRACE_S = 1.0
    DIED, HUNG, ERROR, STALLED = range(4)  # the order in which causes are named

    def __init__(self, ranks: list[tuple[str, int]], stall_s: float, errors_in: str | None = None):
        self.stall_s, self.errors_in = stall_s, errors_in
        self.ranks = list(ranks)
        self.started = None
        self.last_beat: dict = {}
        self.at: dict = {}  # (job, rank) -> where its last beat said it was
        self.counters: dict = {}
        self.busy: dict = {}
        self.moved: dict = {}  # job -> when it last made progress
        self.finished_ranks: set = set()
        self.ended_ranks: set = set()
        self.failures: list[tuple[int, str]] = []
        self.failed_ranks: set = set()
        self.stalled_jobs: set = set()
        self.first_failure = None

    def start(self, now: float) -> None:
        """The replay began: from now on silence and stalls count."""
        self.started = now
        for k in self.ranks:
            self.last_beat[k] = now
            self.moved[k[0]] = now

    def beat(self, key, msg, now: float) -> None:
        """msg: the agent's protocol.Beat."""
        self.last_beat[key] = now
        self.at[key] = msg.at
        self.busy[key] = msg.busy
        counters = (msg.sent, msg.received, msg.ops_done)
        if self.counters.get(key) != counters or self.busy[key]:
            self.counters[key] = counters
            self.moved[key[0]] = now

    def progress(self, key, now: float) -> None:
        self.moved[key[0]] = now

    def finished(self, key) -> None:
        self.finished_ranks.add(key)

    def ended(self, key, rc, now: float) -> None:
        """Its stdout closed (rc: its exit status, None if unknown)."""
        self.ended_ranks.add(key)
        if key in self.failed_ranks or key in self.finished_ranks:
            return  # it said why, or it had finished
        how = "status unknown" if rc is None else \
            f"killed by {_signame(-rc)}" if rc < 0 else f"exit status {rc}"
        hint = f" (see {self.errors_in}/{key[0]}/rank{key[1]}.err)" if self.errors_in else ""
        self._fail(key, self.DIED, f"agent {_name(key)} died ({how}){self._last(key, now)}{hint}", now)

    def error(self, key, msg, now: float) -> None:
        self._fail(key, self.ERROR, f"agent {_name(key)}: {msg}", now)

    def check(self, now: float) -> None:
        if self.started is None:
            return
        live = [k for k in self.ranks if k not in self.finished_ranks and k not in self.ended_ranks]
        for k in live:
            if k not in self.failed_ranks and now - self.last_beat[k] > self.stall_s:
                self._fail(k, self.HUNG, f"agent {_name(k)} stopped responding: no heartbeat for "
                                         f"{now - self.last_beat[k]:.0f} s{self._last(k, now)}", now)
        for job in dict.fromkeys(k[0] for k in live):
            waiting = [k for k in live if k[0] == job]
            if now - self.moved[job] > self.stall_s and job not in self.stalled_jobs:
                self.stalled_jobs.add(job)
                who = "; ".join(f"rank {k[1]} {self.at.get(k) or 'has not reported'}" for k in waiting[:4])
                more = f"; and {len(waiting) - 4} more ranks" if len(waiting) > 4 else ""
                self._fail(None, self.STALLED, f"job {job} made no progress for {now - self.moved[job]:.0f} s "
                                               f"(testbed.stall_timeout_s={self.stall_s:g}): {who}{more}", now)

    def verdict(self, now: float) -> str | None:
        """The failure message, once the grace period after the first failure is over."""
        if not self.failures:
            return None
        settled = len(self.ended_ranks | self.finished_ranks) >= len(self.ranks)
        if now - self.first_failure < self.GRACE_S and not settled:
            return None
        ordered = [m for _, m in sorted(self.failures, key=lambda f: f[0])]
        more = f" (also: {ordered[1]}" + (f"; and {len(ordered) - 2} more" if len(ordered) > 2 else "") + ")" \
            if len(ordered) > 1 else ""
        return ordered[0] + more

    def _fail(self, key, cause: int, msg: str, now: float) -> None:
        self.failed_ranks.add(key)
        self.failures.append((cause, msg))
        self.first_failure = self.first_failure or now

    def _last(self, key, now: float) -> str:
        at = self.at.get(key)
        if not at:
            return "; it had not reported yet"
        return f"; its last report ({now - self.last_beat[key]:.1f} s before): {at}"


def _name(key) -> str:
    return f"{key[0]}/rank {key[1]}"


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
