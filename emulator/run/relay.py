"""The launcher's half of co-scheduling: agents' announcements go to the
controller's REST API, and its answers go back to every rank of the job.

Agents run in Mininet host namespaces, whose 127.0.0.1 is their own, so they
cannot reach the controller: it listens on the root namespace's loopback
only. The runner lives there and acts as the jobs' launcher. It POSTs each
announcement an agent writes to its stdout, then writes the answer to the
stdin of every rank of that job, so that all of them shift together. When
the controller is unreachable, errs, or does not answer within the timeout,
the runner answers offset 0 itself (status "fallback"): the agents send at
once, and the event says why. The answer is controller.cosched.Answer; what
each rank is told, emulator.agent.protocol.PhaseAnswer (docs/contracts.md).

Offsets come back in the controller's seconds, which in dtnet are emulated
(wall-clock) seconds; events carry them both ways, ``offset_emulated_s`` and
``offset_s`` (real-cluster: divided by the run's time dilation).
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from badinput import InputError
from badinput.schema import from_dict
from controller.cosched import Answer
from emulator.agent.protocol import Announce, PhaseAnswer, line
from experiment.outputs.announcements import summarize  # noqa: F401  (the engine-neutral summary)

PATH = "/dtnet/v1/announce"
ANNOUNCE_TIMEOUT_S = 1.0
MAX_ANSWER_BYTES = 1 << 20
# No proxy: the controller is on this machine's loopback, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Decision:
    """What the agents are told for one phase: the controller's answer, or why there is none."""
    status: str                   # "answered" | "fallback"
    answer: Answer | None = None  # when answered
    reason: str | None = None     # when a fallback

    @property
    def delay_s(self) -> float:
        return self.answer.start_offset_s if self.answer else 0.0


def fallback(reason: str) -> Decision:
    return Decision("fallback", reason=reason[:200])


def decision_from_answer(data) -> Decision:
    """Check the controller's answer against controller.cosched.Answer; a malformed one is a
    fallback naming the key, not a crash."""
    try:
        return Decision("answered", from_dict(Answer, data))
    except InputError as e:
        return fallback(f"bad answer: {e}")


def post(base_url: str, body: dict, timeout_s: float, opener=_OPENER) -> Decision:
    """POST one announcement; every failure becomes a fallback naming its cause."""
    req = urllib.request.Request(base_url + PATH, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with opener.open(req, timeout=timeout_s) as r:
            raw = r.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read(4096)).get("error", "")
        except (ValueError, AttributeError, OSError):
            detail = ""
        return fallback(f"HTTP {e.code}" + (f": {detail}" if detail else ""))
    except urllib.error.URLError as e:
        return fallback(_why(e.reason))
    except (OSError, ValueError) as e:  # a timeout while reading, a torn answer
        return fallback(_why(e))
    try:
        return decision_from_answer(json.loads(raw))
    except ValueError:
        return fallback("bad answer: expected JSON")


def _why(err) -> str:
    if isinstance(err, TimeoutError) or "timed out" in str(err):
        return "timeout"
    return f"unreachable: {err}"


def phase_answer(iteration: int, start_at: float, d: Decision, link_mbps: float) -> PhaseAnswer:
    """What one rank is told: the controller's pace share as emulated Mb/s of its NIC, and the
    pace window in wall-clock time."""
    a = d.answer
    if a is not None and a.pace_share and a.pace_until_s > a.pace_from_s:
        return PhaseAnswer(iteration, start_at, d.delay_s, d.status, a.pace_share * link_mbps,
                           start_at + a.pace_from_s, start_at + a.pace_until_s)
    return PhaseAnswer(iteration, start_at, d.delay_s, d.status)


class Relay:
    """One run's announcement relay: the job's ranks, where the controller is."""

    def __init__(self, base_url: str | None, dilation: float, timeout_s: float = ANNOUNCE_TIMEOUT_S,
                 post=post, clock=time.time):
        self.base_url, self.dilation, self.timeout_s = base_url, dilation, timeout_s
        self.post, self.clock = post, clock
        self.ranks: dict[str, list] = {}  # job -> [(rank, stdin, link_mbps)]

    def add(self, job: str, rank: int, stdin, link_mbps: float) -> None:
        self.ranks.setdefault(job, []).append((rank, stdin, link_mbps))

    def handle(self, job: str, rank: int, msg: Announce) -> dict:
        """Relay one announcement; returns its event. Every rank of the job is told."""
        if self.base_url is None:
            d = fallback("no controller")
        else:
            d = self.post(self.base_url, msg.body, self.timeout_s)
        t_ans = self.clock()
        start_at = t_ans + d.delay_s
        for _, stdin, link_mbps in self.ranks.get(job, []):
            try:
                stdin.write(line(phase_answer(msg.iteration, start_at, d, link_mbps)))
                stdin.flush()
            except (OSError, ValueError):
                pass  # an agent that died is reported by the runner when its stdout closes
        a = d.answer
        paced = a is not None and a.pace_share and a.pace_until_s > a.pace_from_s
        flows = msg.body.get("flows")
        return {"kind": "announce", "job": job, "rank": rank, "iteration": msg.iteration, "start": msg.t,
                "end": t_ans, "status": d.status, "reason": d.reason, "offset_emulated_s": d.delay_s,
                "offset_s": d.delay_s / self.dilation, "priority": a.priority if a else None,
                "pace_share": a.pace_share if paced else None,
                "pace_from_s": a.pace_from_s / self.dilation if paced else 0.0,
                "pace_until_s": a.pace_until_s / self.dilation if paced else 0.0,
                "flows": len(flows) if isinstance(flows, list) else 0}
