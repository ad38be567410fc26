"""Collective schedules as arrays, built once per (op, algorithm, ranks, size, root, servers).

The schedule and its chunk dependencies are exactly what the emulator's plan hands the agents
(``traffic.collectives.build_schedule`` and ``schedule.send_dependencies``); here they become
numpy arrays so that an instance of the collective is a base offset plus a template.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from traffic.collectives import build_schedule, split_even
from traffic.collectives.schedule import send_dependencies


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
    idx = np.array([v for x in lists for v in x], dtype=np.int64)
    return indptr, idx


@dataclass(frozen=True)
class Template:
    """One collective's transfers: src/dst are group-local ranks, in schedule order (the order
    each agent queues its sends). earlier: receives that must be complete first; gate: receives
    followed slice by slice; waiters: the reverse of earlier."""

    op: str
    algorithm: str
    nranks: int
    size_bytes: int
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    step: np.ndarray
    earlier_ptr: np.ndarray
    earlier: np.ndarray
    gate_ptr: np.ndarray
    gate: np.ndarray
    waiter_ptr: np.ndarray
    waiter: np.ndarray
    num_steps: int

    @property
    def n(self) -> int:
        return len(self.src)

    def sends_of(self, r: int) -> np.ndarray:
        return np.flatnonzero(self.src == r)

    def recvs_of(self, r: int) -> np.ndarray:
        return np.flatnonzero(self.dst == r)


RING_CLOSED_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def _ring_template(op: str, n: int, size_bytes: int) -> Template:
    """The ring's template without its schedule (the schedule and send_dependencies of a 256-rank
    all-reduce take seconds): step s, rank r sends chunk (r - s - 1) mod n to r + 1 (all-gather
    alone: (r - s) mod n), in the schedule's order (step, then sender); rank r receives at step s
    what r - 1 sends, so the receives of the chunk it sends come at steps s - 1 and, in an
    all-reduce, s - 1 - n (its reduce-scatter pass), each carrying exactly that chunk: both are
    followed slice by slice (gate), none waited for whole (earlier). Equal, array for array, to
    the template built from the schedule (tests/unit/traffic/test_ring_template.py)."""
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    chunk_bytes = np.array(split_even(size_bytes, n), float)
    step = np.repeat(np.arange(steps, dtype=np.int64), n)
    src = np.tile(np.arange(n, dtype=np.int64), steps)
    chunk = (src - step - (0 if op == "all_gather" else 1)) % n
    # Gates of the send at (s, r): the receives at steps s - 1 - n and s - 1 that exist, in step order.
    back = [step - 1 - n, step - 1] if op == "all_reduce" else [step - 1]
    have = np.stack([b >= 0 for b in back], axis=1)
    recv = np.stack([b * n + (src - 1) % n for b in back], axis=1)
    gate_ptr = np.concatenate([[0], np.cumsum(have.sum(axis=1))]).astype(np.int64)
    none = np.zeros(len(src) + 1, np.int64)
    empty = np.zeros(0, np.int64)
    return Template(op, "ring", n, size_bytes, src, (src + 1) % n, chunk_bytes[chunk], step,
                    none, empty, gate_ptr, recv[have], none.copy(), empty.copy(), steps)


@lru_cache(maxsize=4096)
def template(op: str, algorithm: str, nranks: int, size_bytes: int, root: int = 0,
             gpus_per_server: int | None = None) -> Template:
    if (algorithm == "ring" and op in RING_CLOSED_OPS and type(nranks) is int and nranks >= 2
            and type(size_bytes) is int and size_bytes >= 0 and type(root) is int and 0 <= root < nranks):
        return _ring_template(op, nranks, size_bytes)
    sched = build_schedule(op, algorithm, nranks, size_bytes, root=root, gpus_per_server=gpus_per_server)
    tr = sched.transfers
    deps = send_dependencies(sched) if tr else []
    earlier = [list(e) for e, _ in deps]
    gate = [list(g) for _, g in deps]
    waiters: list[list[int]] = [[] for _ in tr]
    for i, e in enumerate(earlier):
        for j in e:
            waiters[j].append(i)
    ep, ei = _csr(earlier)
    gp, gi = _csr(gate)
    wp, wi = _csr(waiters)
    return Template(op, algorithm, nranks, size_bytes,
                    np.array([t.src for t in tr], np.int64), np.array([t.dst for t in tr], np.int64),
                    np.array([t.size_bytes for t in tr], float), np.array([t.step for t in tr], np.int64),
                    ep, ei, gp, gi, wp, wi, sched.num_steps)


@dataclass(frozen=True)
class BundleShape:
    """A collective as connections tied to one rate: (src, dst) group-local pairs and the bytes
    each carries in total, plus the schedule's step count (for the latency term). after: in a
    collective of several bundles (bundle_stages), those whose ends start this one (none: the
    collective's start)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    num_steps: int
    chunk_bytes: float  # a typical transfer's bytes (the latency-bound step's size)
    after: tuple = ()


_EMPTY = BundleShape(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0, 0.0)


def _shape(n: int, src, dst, nbytes, num_steps: int, chunk_bytes: float, after: tuple = ()) -> BundleShape:
    """Transfers (or per-pair totals) merged into one entry per connection, in (src, dst) order."""
    key = np.asarray(src, np.int64) * n + np.asarray(dst, np.int64)
    pairs, inv = np.unique(key, return_inverse=True)
    b = np.bincount(inv, weights=np.asarray(nbytes, float), minlength=len(pairs))
    return BundleShape(pairs // n, pairs % n, b, int(num_steps), float(chunk_bytes), after)


def transfer_stages(t: Template) -> np.ndarray:
    """Stage of each transfer: a send that must wait for a whole receive (``earlier``) runs one
    stage after it; one that follows a receive slice by slice (``gate``) streams in its stage."""
    ep, ei, gp, gi = t.earlier_ptr.tolist(), t.earlier.tolist(), t.gate_ptr.tolist(), t.gate.tolist()
    st = [0] * t.n
    for i in np.argsort(t.step, kind="stable").tolist():  # dependencies lie at earlier steps
        s = max((st[e] + 1 for e in ei[ep[i]:ep[i + 1]]), default=0)
        st[i] = max(s, max((st[g] for g in gi[gp[i]:gp[i + 1]]), default=0))
    return np.array(st, np.int64)


def stages_of_template(t: Template) -> tuple[BundleShape, ...]:
    """One bundle per stage, each started by the end of the one before."""
    stage = transfer_stages(t)
    out = []
    for k in range(int(stage.max()) + 1 if t.n else 0):
        sel = stage == k
        out.append(_shape(t.nranks, t.src[sel], t.dst[sel], t.size[sel], len(np.unique(t.step[sel])),
                          np.median(t.size[sel]), (k - 1,) if k else ()))
    return tuple(out)


def _ring_pairs(members: np.ndarray, sizes: np.ndarray, skip: int, steps=None) -> tuple:
    """(src, dst, bytes) per connection of rings over each row of members (ranks, shape (rings, k)):
    a reduce-scatter (skip 0) or all-gather (skip 1) whose chunk i (sizes[:, i]) ends (starts)
    at member i, where member i sends chunk (i - s - 1 + skip) mod k at step s. steps: only
    those steps (default all k - 1)."""
    k = members.shape[1]
    steps = range(k - 1) if steps is None else steps
    i = np.arange(k)
    nbytes = sum((sizes[:, (i - s - 1 + skip) % k] for s in steps), np.zeros(sizes.shape))
    return members.ravel(), members[:, (i + 1) % k].ravel(), nbytes.ravel()


def hierarchical_stages(op: str, n: int, size_bytes: int, g: int) -> tuple[BundleShape, ...] | None:
    """Hierarchical all-reduce, reduce-scatter and all-gather as ring phases inside servers and along
    rails, without the schedule (its rail rings have n^2 / g transfers). A phase's steps stream
    on their connections. As send_dependencies has it, a phase's first step streams behind the
    last step of the phase before, and the rest of a rail phase waits for all of it (its chunks
    were reduced inside the server), while a server phase after a rail phase streams on."""
    M = n // g
    if op not in ("all_reduce", "reduce_scatter", "all_gather") or g < 2 or M < 2:
        return None
    cb = np.array(split_even(size_bytes, n), float)
    servers = np.arange(n).reshape(M, g)
    rails = servers.T.copy()                     # rails[lr, m] = m * g + lr
    out: list[BundleShape] = []

    def add(members, sizes, steps, after):
        """One bundle of ring steps ((skip, step) pairs: skip 0 reduce-scatter, 1 all-gather)."""
        parts = [_ring_pairs(members, sizes, skip, [step]) for skip, step in steps]
        out.append(_shape(n, parts[0][0], parts[0][1], sum(p[2] for p in parts), len(steps), np.median(sizes),
                          after))
        return len(out) - 1

    def phase(members, sizes, steps, after, wait=None):
        """A ring phase as bundles: its steps but the last, then the last (the next phase streams
        behind it); wait: the bundle all but this phase's first step wait for. Returns (the bundle
        the next phase starts after, this phase's last bundle)."""
        if wait is not None and len(steps) > 1:
            first = add(members, sizes, steps[:1], after)
            after, steps = (wait, first), steps[1:]
        if len(steps) > 1:
            after = (add(members, sizes, steps[:-1], after),)
        return after, add(members, sizes, steps[-1:], after)

    rs = lambda k: [(0, s) for s in range(k - 1)]  # noqa: E731
    ag = lambda k: [(1, s) for s in range(k - 1)]  # noqa: E731
    if op == "all_reduce":  # chunk lr * M + m: piece lr's m-th, reduced at rank m * g + lr along rail lr
        chunk = cb.reshape(g, M)
        srv = np.broadcast_to(chunk.sum(1), (M, g))
        body, last = phase(servers, srv, rs(g), ())
        body, _ = phase(rails, chunk, rs(M) + ag(M), body, wait=last)
        phase(servers, srv, ag(g), body)
        return tuple(out)
    chunk = cb[rails]                            # group lr in a server: rail lr's outputs (chunk r: rank r)
    srv = np.broadcast_to(chunk.sum(1), (M, g))
    if op == "reduce_scatter":
        body, last = phase(servers, srv, rs(g), ())
        phase(rails, chunk, rs(M), body, wait=last)
    else:
        body, _ = phase(rails, chunk, ag(M), ())
        phase(servers, srv, ag(g), body)
    return tuple(out)


@lru_cache(maxsize=4096)
def bundle_stages(op: str, algorithm: str, nranks: int, size_bytes: int, root: int = 0,
                  gpus_per_server: int | None = None) -> tuple[BundleShape, ...]:
    """The collective as bundles, each started by the end of the one its `after` names: one for a
    ring (its steps all stream), one per stage of the schedule (transfer_stages) in turn for tree
    and halving-doubling, and the ring phases of hierarchical with their overlap."""
    n = nranks
    if n > 1 and ((algorithm == "ring" and op in ("all_reduce", "all_gather", "reduce_scatter"))
                  or (algorithm == "direct" and op == "all_to_all")):
        return (_closed_form_shape(op, algorithm, n, size_bytes),)
    if algorithm == "hierarchical" and n > 1 and gpus_per_server:
        hit = hierarchical_stages(op, n, size_bytes, gpus_per_server)
        if hit is not None:
            return hit
    return stages_of_template(template(op, algorithm, nranks, size_bytes, root, gpus_per_server)) or (_EMPTY,)


def _closed_form_shape(op: str, algorithm: str, n: int, size_bytes: int) -> BundleShape:
    c = np.array(split_even(size_bytes, n), float)
    if algorithm == "ring":
        # A ring over 10^5 ranks has 10^10 transfers: rank i sends every chunk but its own in
        # reduce-scatter, every chunk but chunk i+1 in all-gather.
        i = np.arange(n)
        rs, ag = size_bytes - c, size_bytes - c[(i + 1) % n]
        b = {"all_reduce": rs + ag, "reduce_scatter": rs, "all_gather": ag}[op]
        steps = 2 * (n - 1) if op == "all_reduce" else n - 1
        return BundleShape(i, (i + 1) % n, b, steps, float(size_bytes) / n)
    # direct all-to-all (n^2 transfers): rank s sends block d of its buffer to rank d.
    src = np.repeat(np.arange(n), n - 1)
    dst = (src + np.tile(np.arange(1, n), n)) % n
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    return BundleShape(src, dst, c[dst], 1, float(np.median(c)))


@lru_cache(maxsize=4096)
def bundle_shape(op: str, algorithm: str, nranks: int, size_bytes: int, root: int = 0,
                 gpus_per_server: int | None = None) -> BundleShape:
    """All of a collective's stages as one bundle: the bytes each connection carries in total."""
    stages = bundle_stages(op, algorithm, nranks, size_bytes, root, gpus_per_server)
    if len(stages) == 1:
        return stages[0]
    s = stages
    return _shape(nranks, np.concatenate([x.src for x in s]), np.concatenate([x.dst for x in s]),
                  np.concatenate([x.bytes for x in s]), sum(x.num_steps for x in s),
                  float(np.median(np.concatenate([[x.chunk_bytes] for x in s]))))
