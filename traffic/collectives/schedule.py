"""A collective as steps of point-to-point transfers: the unit the host agents replay."""
from __future__ import annotations

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
