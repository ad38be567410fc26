"""Symbolic executor: moves chunk identities through a schedule and checks the collective's result.

Each (rank, chunk) holds the set of ranks whose contribution it carries. A reducing transfer
adds a disjoint set (a repeat would double-count); a copy must not lose contributions.
Sends in step k read the sender's state from before step k, as the agents do.
"""
from __future__ import annotations

from traffic.collectives.schedule import Schedule


class ScheduleError(AssertionError):
    """The schedule does not compute its collective."""


def initial_state(s: Schedule) -> list[dict[int, frozenset]]:
    n, chunks = s.nranks, range(len(s.chunk_bytes))
    if s.op in ("all_reduce", "reduce_scatter", "reduce"):
        return [{c: frozenset((r,)) for c in chunks} for r in range(n)]
    if s.op == "all_gather":
        return [{r: frozenset((r,))} for r in range(n)]
    if s.op == "all_to_all":
        return [{r * n + d: frozenset((r,)) for d in range(n)} for r in range(n)]
    if s.op == "broadcast":
        return [{c: frozenset((s.root,)) for c in chunks} if r == s.root else {} for r in range(n)]
    if s.op == "sendrecv":
        return [{r: frozenset((r,))} for r in range(n)]
    raise ScheduleError(f"unknown op {s.op}")


def wanted_state(s: Schedule) -> list[dict[int, frozenset]]:
    """What each rank must hold at the end (it may hold more)."""
    n, chunks, everyone = s.nranks, range(len(s.chunk_bytes)), frozenset(range(s.nranks))
    if s.op == "all_reduce":
        return [{c: everyone for c in chunks} for _ in range(n)]
    if s.op == "reduce_scatter":
        return [{r: everyone} for r in range(n)]
    if s.op == "reduce":
        return [{c: everyone for c in chunks} if r == s.root else {} for r in range(n)]
    if s.op == "all_gather":
        return [{c: frozenset((c,)) for c in range(n)} for _ in range(n)]
    if s.op == "all_to_all":
        return [{src * n + r: frozenset((src,)) for src in range(n)} for r in range(n)]
    if s.op == "broadcast":
        return [{c: frozenset((s.root,)) for c in chunks} for _ in range(n)]
    if s.op == "sendrecv":
        return [{(r - 1) % n: frozenset(((r - 1) % n,))} for r in range(n)]
    raise ScheduleError(f"unknown op {s.op}")


def expected_chunk_total(s: Schedule) -> int:
    if s.op == "all_to_all":
        return s.nranks * s.size_bytes  # chunk ids cover every rank's send buffer
    if s.op == "sendrecv":
        return s.nranks * s.size_bytes
    return s.size_bytes


def execute(s: Schedule) -> list[dict[int, frozenset]]:
    """Runs the schedule symbolically; raises ScheduleError on the first impossible move."""
    if s.nranks > 1 and sum(s.chunk_bytes) != expected_chunk_total(s):
        raise ScheduleError(f"chunks hold {sum(s.chunk_bytes)} bytes, expected {expected_chunk_total(s)}")
    state = initial_state(s)
    for k, step in enumerate(s.steps()):
        snapshot = [dict(st) for st in state]
        written: dict[tuple[int, int], str] = {}
        for t in step:
            if not (0 <= t.src < s.nranks and 0 <= t.dst < s.nranks) or t.src == t.dst:
                raise ScheduleError(f"step {k}: bad endpoints {t.src}->{t.dst}")
            if t.size_bytes != sum(s.chunk_bytes[c] for c in t.chunks):
                raise ScheduleError(f"step {k}: {t.src}->{t.dst} says {t.size_bytes} bytes, chunks hold other")
            for c in t.chunks:
                have = snapshot[t.src].get(c)
                if not have:
                    raise ScheduleError(f"step {k}: rank {t.src} sends chunk {c} it does not hold")
                kind = "reduce" if t.reduce else "copy"
                prev_kind = written.setdefault((t.dst, c), kind)
                if prev_kind != kind or kind == "copy" and (t.dst, c, "seen") in written:
                    raise ScheduleError(f"step {k}: rank {t.dst} gets chunk {c} twice in conflicting ways")
                written[(t.dst, c, "seen")] = kind
                mine = state[t.dst].get(c, frozenset())
                if t.reduce:
                    if c not in state[t.dst]:
                        raise ScheduleError(f"step {k}: rank {t.dst} reduces chunk {c} it has no buffer for")
                    if mine & have:
                        raise ScheduleError(f"step {k}: rank {t.dst} would count ranks {sorted(mine & have)} "
                                            f"twice in chunk {c}")
                    state[t.dst][c] = mine | have
                else:
                    if not have >= mine:
                        raise ScheduleError(f"step {k}: copy into rank {t.dst} loses contributions to chunk {c}")
                    state[t.dst][c] = have
    return state


def verify(s: Schedule) -> None:
    """Raises ScheduleError unless the schedule leaves every rank with the result it must hold."""
    final = execute(s)
    for r, want in enumerate(wanted_state(s) if s.nranks > 1 else [{}]):
        for c, contributors in want.items():
            got = final[r].get(c)
            if got != contributors:
                raise ScheduleError(f"{s.op}/{s.algorithm} n={s.nranks}: rank {r} chunk {c} holds "
                                    f"{sorted(got) if got else None}, expected {sorted(contributors)}")
