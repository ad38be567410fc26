"""The rank plan: what one rank's agent does, as the plan writes it and the agent reads it.

experiment.plan writes one per rank (DIR/plans/<job>/rank<N>.json); the emulator's
agent reads it with badinput.schema, so a plan of another version or with a fault
fails the agent at once, naming the key. Sizes and times are emulated (already
scaled), except the event fields of an op, which its events report as they are.
docs/contracts.md has the schema with an example.
"""
from __future__ import annotations

from dataclasses import dataclass

from badinput import InputError

VERSION = 1
OP_KINDS = ("compute", "collective", "send", "recv")


@dataclass(frozen=True)
class Send:
    """A transfer this rank sends: its id, to which rank, its schedule step and emulated bytes."""
    tid: int
    dst: int
    step: int
    size_bytes: int
    after: tuple[int, ...] = ()   # receives (tids) complete before its first byte leaves
    follow: tuple[int, ...] = ()  # receives it follows slice by slice: a slice leaves once each has its share


@dataclass(frozen=True)
class Recv:
    """A transfer this rank receives: its id, from which rank, its step and emulated bytes."""
    tid: int
    src: int
    step: int
    size_bytes: int


@dataclass(frozen=True)
class Op:
    """One op of the rank's trace: it starts once its deps (indices of earlier ops) are done."""
    id: str
    kind: str
    deps: tuple[int, ...] = ()
    iteration: int | None = None
    label: str | None = None
    duration_s: float = 0.0         # compute: emulated seconds
    sends: tuple[Send, ...] = ()
    recvs: tuple[Recv, ...] = ()
    # What the op's event reports (real-cluster units).
    op: str | None = None
    algorithm: str | None = None
    group: str | None = None
    size_bytes: int | None = None
    ranks: int | None = None
    peer: int | None = None

    def check(self) -> None:
        if self.kind not in OP_KINDS:
            raise InputError("kind", "one of " + ", ".join(OP_KINDS), self.kind)
        if self.duration_s < 0:
            raise InputError("duration_s", "seconds >= 0", self.duration_s)


@dataclass(frozen=True)
class Peer:
    """Where a rank this one sends to listens."""
    ip: str
    port: int


@dataclass(frozen=True)
class Straggler:
    """From from_s (emulated seconds after the shared start) every compute op takes factor x as long."""
    from_s: float
    factor: float


@dataclass(frozen=True)
class PhaseBody:
    """The announcement (controller.cosched's) this rank makes for one iteration's phase."""
    iteration: int
    body: dict


@dataclass(frozen=True)
class Phases:
    """Co-scheduling: the iterations whose communication waits for the controller's answer."""
    iterations: tuple[int, ...]
    answer_wait_s: float            # wall seconds without an answer before the phase starts anyway
    announce: tuple[PhaseBody, ...] = ()


@dataclass(frozen=True)
class RankPlan:
    job: str
    rank: int
    host: str                       # the fabric host it runs on
    port: int                       # it listens here
    dilation: float                 # emulated seconds per real second
    slice_bytes: int                # the pipelining granularity of its sends
    start_offset_s: float           # emulated seconds after the shared start
    ops: tuple[Op, ...]
    peers: dict[int, Peer]          # the ranks it sends to
    inbound: int                    # how many ranks connect to it
    transfer_events: bool           # an event per received transfer (not for very large plans)
    connect_timeout_s: float = 30.0
    straggler: Straggler | None = None
    cosched: Phases | None = None
    version: int = VERSION

    def check(self) -> None:
        for i, op in enumerate(self.ops):
            for d in op.deps:
                if not 0 <= d < i:
                    raise InputError(f"ops[{i}].deps", f"indices of earlier ops (0..{i - 1})", d)
            for j, s in enumerate(op.sends):
                if s.dst != self.rank and s.dst not in self.peers:
                    raise InputError(f"ops[{i}].sends[{j}].dst", "this rank or one of its peers", s.dst)
