"""A collective as steps of point-to-point transfers: the unit the host agents replay."""
from __future__ import annotations

import bisect

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transfer:
    step: int          # 0-based step index within the schedule
    src: int           # group-local rank 0..nranks-1
    dst: int
    size_bytes: int
    chunks: tuple = ()  # chunk ids carried (for the symbolic executor)
    reduce: bool = False  # receiver adds into its buffer (True) or stores a copy (False)


@dataclass
class Schedule:
    op: str
    algorithm: str
    nranks: int
    size_bytes: int
    transfers: list[Transfer]
    chunk_bytes: tuple[int, ...] = ()  # bytes of each chunk id; they sum to the op's data size
    root: int = 0
    _by_rank: dict | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_steps(self) -> int:
        return max((t.step for t in self.transfers), default=-1) + 1

    def _index(self):
        # Built once: agents ask per rank, and schedules can hold N^2 transfers.
        if self._by_rank is None:
            sends = {r: [] for r in range(self.nranks)}
            recvs = {r: [] for r in range(self.nranks)}
            for t in sorted(self.transfers, key=lambda t: (t.step, t.src, t.dst)):
                sends[t.src].append(t)
                recvs[t.dst].append(t)
            self._by_rank = (sends, recvs)
        return self._by_rank

    def sends(self, rank: int) -> list[Transfer]:
        """Transfers this rank sends, in step order."""
        return list(self._index()[0].get(rank, ()))

    def recvs(self, rank: int) -> list[Transfer]:
        """Transfers this rank receives, in step order."""
        return list(self._index()[1].get(rank, ()))

    def bytes_sent(self, rank: int) -> int:
        return sum(t.size_bytes for t in self._index()[0].get(rank, ()))

    def bytes_received(self, rank: int) -> int:
        return sum(t.size_bytes for t in self._index()[1].get(rank, ()))

    def steps(self) -> list[list[Transfer]]:
        """Transfers grouped by step: element k holds step k's transfers."""
        out = [[] for _ in range(self.num_steps)]
        for t in self.transfers:
            out[t.step].append(t)
        return out


def send_dependencies(schedule: Schedule) -> list[tuple[list[int], list[int]]]:
    """What each transfer's sender must have received first, by index into
    schedule.transfers: (earlier, gate). A send carrying chunks C depends on the
    sender's receives of any chunk in C at earlier steps. It follows a receive
    slice by slice (gate) when that receive carries exactly its chunks (the
    send is their reduction or copy, so byte b needs byte b of each: a tree
    node forwards as both children's data streams in) or is at the latest such
    step (the pipelining of one step into the next); other receives must be
    complete first (earlier). By chunks, not step order: the two trees of a
    double-binary-tree all-reduce carry different chunks and must not wait on
    each other."""
    tr = schedule.transfers
    # Each rank's receives by chunk, in step order: a send looks up only the receives of its
    # own chunks, not every earlier receive of its rank (that scan made a ring plan O(n^3)).
    by_chunk: dict[tuple[int, int], list[int]] = {}
    for i in sorted(range(len(tr)), key=lambda i: tr[i].step):
        for c in set(tr[i].chunks):
            by_chunk.setdefault((tr[i].dst, c), []).append(i)
    steps = {k: [tr[j].step for j in lst] for k, lst in by_chunk.items()}
    out = []
    for t in tr:
        mine = set(t.chunks)
        found = set()
        for c in mine:
            lst = by_chunk.get((t.src, c))
            if lst:
                found.update(lst[:bisect.bisect_left(steps[t.src, c], t.step)])
        if not found:
            out.append(([], []))
            continue
        deps = sorted(found, key=lambda j: (tr[j].step, j))  # the receives' step order, as before
        last = tr[deps[-1]].step
        follow = [tr[j].step == last or set(tr[j].chunks) == mine for j in deps]
        out.append(([j for j, f in zip(deps, follow) if not f], [j for j, f in zip(deps, follow) if f]))
    return out
