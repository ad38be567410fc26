"""The launcher's half of co-scheduling: agents' announcements go to the
controller's REST API, and its answers go back to every rank of the job.

Agents run in Mininet host namespaces, whose 127.0.0.1 is their own, so they
cannot reach the controller: it listens on the root namespace's loopback
only. The runner lives there and acts as the jobs' launcher. It POSTs each
announcement an agent writes to its stdout, then writes the answer to the
stdin of every rank of that job, so that all of them shift together. When
the controller is unreachable, errs, or does not answer within the timeout,
the runner answers offset 0 itself (status "fallback"): the agents send at
once, and the event says why.

Offsets come back in the controller's seconds, which in dtnet are emulated
(wall-clock) seconds; events carry them both ways, ``offset_emulated_s`` and
``offset_s`` (real-cluster: divided by the run's time dilation).
"""
from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from experiment.outputs.announcements import summarize  # noqa: F401  (the engine-neutral summary)

PATH = "/dtnet/v1/announce"
ANNOUNCE_TIMEOUT_S = 1.0
MAX_ANSWER_BYTES = 1 << 20
# No proxy: the controller is on this machine's loopback, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Decision:
    """What the agents are told for one phase (the controller's seconds)."""
    status: str  # "answered" | "fallback"
    delay_s: float = 0.0
    priority: int | None = None
    pace_share: float | None = None  # of each sender's NIC rate, inside the window
    pace_from_s: float = 0.0  # the pace window, from the phase start
    pace_until_s: float = 0.0
    reason: str | None = None


def fallback(reason: str) -> Decision:
    return Decision("fallback", reason=reason[:200])


def decision_from_answer(answer) -> Decision:
    """Check the controller's answer; a malformed one is a fallback, not a crash."""
    if not isinstance(answer, dict):
        return fallback("bad answer: expected a JSON object")
    delay = answer.get("start_offset_s")
    if not _number(delay) or delay < 0:
        return fallback(f"bad answer: start_offset_s: expected seconds >= 0, found {delay!r}")
    share = answer.get("pace_share")
    if share is not None and not (_number(share) and 0 < share <= 1):
        return fallback(f"bad answer: pace_share: expected a fraction in (0, 1], found {share!r}")
    window = (0.0, 0.0)
    if share is not None:
        window = (answer.get("pace_from_s"), answer.get("pace_until_s"))
        if not all(_number(t) for t in window) or not 0 <= window[0] <= window[1]:
            return fallback(f"bad answer: pace_from_s, pace_until_s: expected 0 <= from <= until seconds, "
                            f"found {window!r}")
    prio = answer.get("priority")
    return Decision("answered", float(delay), prio if isinstance(prio, int) else None,
                    float(share) if share is not None and window[1] > window[0] else None,
                    float(window[0]), float(window[1]))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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


def agent_line(iteration: int, start_at: float, d: Decision, link_mbps: float) -> str:
    """The ``offset`` line one rank reads (see emulator.agent): its pace in
    emulated Mb/s and the pace window in wall-clock time."""
    if d.pace_share:
        pace = f"{d.pace_share * link_mbps!r} {start_at + d.pace_from_s!r} {start_at + d.pace_until_s!r}"
    else:
        pace = "- - -"
    return f"offset {iteration} {start_at!r} {d.delay_s!r} {d.status} {pace}\n"


class Relay:
    """One run's announcement relay: the job's ranks, where the controller is."""

    def __init__(self, base_url: str | None, dilation: float, timeout_s: float = ANNOUNCE_TIMEOUT_S,
                 post=post, clock=time.time):
        self.base_url, self.dilation, self.timeout_s = base_url, dilation, timeout_s
        self.post, self.clock = post, clock
        self.ranks: dict[str, list] = {}  # job -> [(rank, stdin, link_mbps)]

    def add(self, job: str, rank: int, stdin, link_mbps: float) -> None:
        self.ranks.setdefault(job, []).append((rank, stdin, link_mbps))

    def handle(self, job: str, rank: int, msg: dict) -> dict:
        """Relay one announcement; returns its event. Every rank of the job is told."""
        t_sent = msg.get("t") if _number(msg.get("t")) else self.clock()
        body = msg.get("body")
        if self.base_url is None:
            d = fallback("no controller")
        elif not isinstance(body, dict):
            d = fallback("agent sent no announcement body")
        else:
            d = self.post(self.base_url, body, self.timeout_s)
        t_ans = self.clock()
        start_at = t_ans + d.delay_s
        it = msg.get("iteration")
        for _, stdin, link_mbps in self.ranks.get(job, []):
            try:
                stdin.write(agent_line(it, start_at, d, link_mbps))
                stdin.flush()
            except (OSError, ValueError):
                pass  # an agent that died is reported by the runner when its stdout closes
        flows = body.get("flows") if isinstance(body, dict) else None
        return {"kind": "announce", "job": job, "rank": rank, "iteration": it, "start": t_sent, "end": t_ans,
                "status": d.status, "reason": d.reason, "offset_emulated_s": d.delay_s,
                "offset_s": d.delay_s / self.dilation, "priority": d.priority, "pace_share": d.pace_share,
                "pace_from_s": d.pace_from_s / self.dilation, "pace_until_s": d.pace_until_s / self.dilation,
                "flows": len(flows) if isinstance(flows, list) else 0}
