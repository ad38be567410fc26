"""The lines between the runner and its agents: one JSON object a line, each a versioned message.

    runner -> agent (stdin):   Go, then PhaseAnswer for every phase its job announced
    agent -> runner (stdout):  Ready, Beat, Announce, Done, Error, and the events
                               (an object with "kind" instead of "ctl": docs/outputs.md)

Every message has "ctl" naming its class and a "version". read() refuses a line that
breaks its message's schema with an InputError naming the key; docs/contracts.md lists
them all. Stdlib only (the agents import it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from badinput import InputError
from badinput.schema import from_dict, to_dict

VERSION = 1
ANSWER_STATUSES = ("answered", "fallback")


@dataclass(frozen=True)
class Go:
    """Start the replay: t0 is the wall-clock start every agent of the run shares."""
    t0: float
    version: int = VERSION


@dataclass(frozen=True)
class PhaseAnswer:
    """The answer to one announced phase, sent to every rank of the job.

    No rank starts the iteration's communication before start_at (wall clock). delay_s
    is the controller's offset, in its (emulated) seconds. With a pace, the rank sends at
    most pace_mbps (emulated Mb/s) from pace_from until pace_until (wall clock)."""
    iteration: int
    start_at: float
    delay_s: float
    status: str                      # answered | fallback (the runner answered: offset 0)
    pace_mbps: float | None = None
    pace_from: float | None = None
    pace_until: float | None = None
    version: int = VERSION

    def check(self) -> None:
        if self.status not in ANSWER_STATUSES:
            raise InputError("status", "one of " + ", ".join(ANSWER_STATUSES), self.status)
        if self.delay_s < 0:
            raise InputError("delay_s", "seconds >= 0", self.delay_s)
        pace = (self.pace_mbps, self.pace_from, self.pace_until)
        if any(p is not None for p in pace) and (None in pace or self.pace_mbps <= 0
                                                 or self.pace_from > self.pace_until):
            raise InputError("pace_mbps", "a rate > 0 with pace_from <= pace_until, or no pace at all", pace)


@dataclass(frozen=True)
class Ready:
    """Listening, every peer connected, connections warmed: waiting for Go."""
    rank: int
    version: int = VERSION


@dataclass(frozen=True)
class Beat:
    """About once a second: progress counters, whether it is busy (computing, waiting to
    start or on a gate), and where it is (op, step, peer awaited), for failure messages."""
    rank: int
    sent: int
    received: int
    ops_done: int
    busy: bool
    at: str
    version: int = VERSION


@dataclass(frozen=True)
class Announce:
    """One rank per phase, when it is ready: the announcement (controller.cosched) to relay.
    t is when it was made (wall clock)."""
    iteration: int
    t: float
    body: dict
    version: int = VERSION


@dataclass(frozen=True)
class Done:
    """Every op done: the rank's totals, in emulated bytes. The agent exits 0."""
    rank: int
    bytes_sent: int
    bytes_received: int
    checksum_errors: int
    version: int = VERSION


@dataclass(frozen=True)
class Error:
    """The rank failed: msg names the op and step (rank None: its plan could not be read). The
    agent exits 1."""
    rank: int | None
    msg: str
    version: int = VERSION


MESSAGES = {"go": Go, "answer": PhaseAnswer, "ready": Ready, "beat": Beat, "announce": Announce, "done": Done,
            "error": Error}
_CTL = {cls: name for name, cls in MESSAGES.items()}


def line(msg) -> str:
    """A message as one line, newline included."""
    return json.dumps({"ctl": _CTL[type(msg)], **to_dict(msg)}, separators=(",", ":")) + "\n"


def read(data):
    """A message from its decoded JSON object (or its line); InputError when it breaks the schema."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            raise InputError("line", "a JSON object", data[:60]) from None
    if not isinstance(data, dict) or data.get("ctl") not in MESSAGES:
        raise InputError("ctl", "one of " + ", ".join(MESSAGES), data.get("ctl") if isinstance(data, dict) else data)
    cls = MESSAGES[data["ctl"]]
    return from_dict(cls, {k: v for k, v in data.items() if k != "ctl"}, key=data["ctl"])
