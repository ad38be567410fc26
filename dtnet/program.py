"""For programs that dtnet runs (`workload: {command: [...]}`): report what dtnet should measure.

Each report is one line on stdout, a JSON object with the key "dtnet" (docs/real-programs.md):

    {"dtnet": "iteration", "iteration": 3, "time_s": 0.0421, "end": 1764600000.25}
    {"dtnet": "collective", "op": "all_reduce", "size_bytes": 1048576, "start": ..., "end": ...}

Times are the machine's wall clock (time.time(), which every emulated host shares), sizes the
bytes the program really moves. dtnet turns them into real-cluster units itself. Standard
library only, so that any program can import it; printing without dtnet around is harmless.

    from dtnet import program
    for it in range(10):
        with program.iteration(it):
            with program.collective("all_reduce", t.numel() * t.element_size(), iteration=it):
                dist.all_reduce(t)
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

__all__ = ["iteration", "collective", "report_iteration", "report_collective", "next_id", "profile_dir",
           "under_dtnet", "exit"]

_seq: dict[str, int] = {}


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()  # dtnet reads the line as the run goes


def report_iteration(index: int, time_s: float, end: float | None = None) -> None:
    """Iteration `index` took time_s seconds of wall time and ended at `end` (default now)."""
    _emit({"dtnet": "iteration", "iteration": int(index), "time_s": float(time_s),
           "end": time.time() if end is None else float(end)})


def next_id(group: str = "world") -> str:
    """The id of this rank's next collective on `group`: ranks launch a group's collectives in the
    same order, so the n-th launch is the same collective everywhere. Take it at launch when the
    collective is asynchronous (ends may be seen in another order than the launches)."""
    n = _seq.get(group, 0)
    _seq[group] = n + 1
    return f"{group}#{n}"


def report_collective(op: str, size_bytes: int, start: float, end: float, *, iteration: int | None = None,
                      group: str = "world", ranks: int | None = None, id: str | None = None) -> None:
    """One collective of this rank from `start` to `end` (time.time()). dtnet matches the ranks'
    reports up by id (default: next_id(group), so report blocking collectives in the order they
    ran) to time the whole collective, from the first rank's start to the last rank's end."""
    msg = {"dtnet": "collective", "op": op, "size_bytes": int(size_bytes), "start": float(start),
           "end": float(end), "group": group, "id": id or next_id(group)}
    if iteration is not None:
        msg["iteration"] = int(iteration)
    if ranks is not None:
        msg["ranks"] = int(ranks)
    _emit(msg)


@contextlib.contextmanager
def iteration(index: int):
    """Time the body as iteration `index` and report it when the body ends without an error."""
    t0 = time.time()
    yield
    t1 = time.time()
    report_iteration(index, t1 - t0, end=t1)


@contextlib.contextmanager
def collective(op: str, size_bytes: int, **kw):
    """Time the body (a blocking collective call) and report it; keywords as report_collective."""
    t0 = time.time()
    yield
    report_collective(op, size_bytes, t0, time.time(), **kw)


def profile_dir() -> str | None:
    """Where to write profiler traces when the experiment asks for them (workload.profile: true)."""
    return os.environ.get("DTNET_PROFILE_DIR") or None


def under_dtnet() -> bool:
    return "DTNET_JOB" in os.environ


def exit(status: int) -> None:
    """End the process with ``status`` once its output is flushed, skipping the interpreter's
    finalization. torch's C++ threads (gloo's, the profiler's) may still be joinable then and
    abort the process with SIGABRT ("terminate called without an active exception") after a
    run that succeeded; seen here on 1 rank of 4 with gloo and the profiler, torch 2.13. Call
    it last, after destroy_process_group and after every file is written."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(int(status))
