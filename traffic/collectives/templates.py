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


@lru_cache(maxsize=4096)
def template(op: str, algorithm: str, nranks: int, size_bytes: int, root: int = 0,
             gpus_per_server: int | None = None) -> Template:
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
    each carries in total, plus the schedule's step count (for the latency term)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    num_steps: int
    chunk_bytes: float  # a typical transfer's bytes (the latency-bound step's size)


@lru_cache(maxsize=4096)
def bundle_shape(op: str, algorithm: str, nranks: int, size_bytes: int, root: int = 0,
                 gpus_per_server: int | None = None) -> BundleShape:
    n = nranks
    if algorithm == "ring" and op in ("all_reduce", "all_gather", "reduce_scatter") and n > 1:
        # Closed form (a ring over 10^5 ranks has 10^10 transfers): rank i sends every chunk
        # but its own in reduce-scatter, every chunk but chunk i+1 in all-gather.
        c = np.array(split_even(size_bytes, n), float)
        i = np.arange(n)
        rs, ag = size_bytes - c, size_bytes - c[(i + 1) % n]
        b = {"all_reduce": rs + ag, "reduce_scatter": rs, "all_gather": ag}[op]
        steps = 2 * (n - 1) if op == "all_reduce" else n - 1
        return BundleShape(i, (i + 1) % n, b, steps, float(size_bytes) / n)
    if algorithm == "direct" and op == "all_to_all" and n > 1:
        # Closed form too (n^2 transfers): rank s sends block d of its buffer to rank d.
        c = np.array(split_even(size_bytes, n), float)
        src = np.repeat(np.arange(n), n - 1)
        dst = (src + np.tile(np.arange(1, n), n)) % n
        order = np.lexsort((dst, src))
        src, dst = src[order], dst[order]
        return BundleShape(src, dst, c[dst], 1, float(np.median(c)))
    t = template(op, algorithm, nranks, size_bytes, root, gpus_per_server)
    if not t.n:
        return BundleShape(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 0, 0.0)
    key = t.src * n + t.dst
    pairs, inv = np.unique(key, return_inverse=True)
    b = np.bincount(inv, weights=t.size, minlength=len(pairs))
    return BundleShape(pairs // n, pairs % n, b, t.num_steps, float(np.median(t.size)))
