"""Analytical alpha-beta time of a schedule, for comparing the emulator against theory."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from badinput import InputError
from traffic.collectives.algorithms import split_even
from traffic.collectives.schedule import Schedule


def busbw_factor(op: str, nranks: int) -> float:
    """nccl-tests: busbw = algbw x this factor, so that it compares with the link rate."""
    if nranks < 2:
        return 0.0
    if op == "all_reduce":
        return 2 * (nranks - 1) / nranks
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (nranks - 1) / nranks
    return 1.0


def _rates_and_servers(nranks, link_gbps, latency_s, intra_gbps, gpus_per_server, server_of):
    """Checked arguments of predict_time_s: (bytes/s through the fabric, inside a server), and
    group rank -> server id (None: no servers)."""
    if not link_gbps or link_gbps <= 0:
        raise InputError("link_gbps", "a rate > 0", link_gbps)
    if latency_s < 0:
        raise InputError("latency_s", "a time >= 0", latency_s)
    if gpus_per_server is not None and server_of is not None:
        raise InputError("server_of", "no server_of when gpus_per_server is given", server_of)
    located = gpus_per_server is not None or server_of is not None
    if (intra_gbps is None) == located:
        raise InputError("intra_gbps", "to be given together with gpus_per_server or server_of", intra_gbps)
    if intra_gbps is not None and intra_gbps <= 0:
        raise InputError("intra_gbps", "a rate > 0", intra_gbps)
    if server_of is not None and len(server_of) != nranks:
        raise InputError("server_of", f"a server id for each of the {nranks} ranks", len(server_of))
    rates = (link_gbps * 1e9 / 8, (intra_gbps or link_gbps) * 1e9 / 8)
    server = server_of if server_of is not None else (
        [r // gpus_per_server for r in range(nranks)] if gpus_per_server else None)

    return rates, server


def predict_time_s(schedule: Schedule, link_gbps: float, latency_s: float, *,
                   pipeline_slice_bytes: int | None = None, intra_gbps: float | None = None,
                   gpus_per_server: int | None = None, server_of: Sequence[int] | None = None) -> float:
    """Seconds the schedule takes when every rank has one full-duplex NIC of `link_gbps`.

    Lock-step (default): each step costs latency_s plus the busiest NIC's bytes in that step
    (its sends and its receives are limited separately) over the bandwidth. This is the
    textbook alpha-beta cost: ring all-reduce gives 2(N-1)(alpha + S/(N B)).
    With `pipeline_slice_bytes`, steps overlap slice by slice as the agents do: one slice per step
    fills the pipeline, then the busiest NIC's total bytes stream at the link rate.
    With `intra_gbps` and `gpus_per_server`, transfers inside a server use the intra-server rate;
    `server_of` (group rank -> server id) says where the ranks are when they are not in blocks of
    `gpus_per_server` (a rail-aligned "snake" order, say).
    """
    rates, server = _rates_and_servers(schedule.nranks, link_gbps, latency_s, intra_gbps, gpus_per_server,
                                       server_of)

    def link_class(t):  # 0 = through the fabric, 1 = inside a server
        return int(server is not None and server[t.src] == server[t.dst])

    total = 0.0
    busiest_total = {}
    fill = 0.0
    for step in schedule.steps():
        if not step:
            continue
        load: dict = {}
        for t in step:
            cls = link_class(t)
            for key in ((t.src, "tx", cls), (t.dst, "rx", cls)):
                load[key] = load.get(key, 0) + t.size_bytes
                busiest_total[key] = busiest_total.get(key, 0) + t.size_bytes
        step_s = max(b / rates[k[2]] for k, b in load.items())
        total += latency_s + step_s
        if pipeline_slice_bytes:
            per_slice = max(min(b, pipeline_slice_bytes) / rates[k[2]] for k, b in load.items())
            fill += latency_s + per_slice
    if pipeline_slice_bytes:
        stream = max((b / rates[k[2]] for k, b in busiest_total.items()), default=0.0)
        return min(total, fill + stream)
    return total


RING_OPS = {"all_reduce": ("rs", "ag"), "reduce_scatter": ("rs",), "all_gather": ("ag",)}


def ring_predict_time_s(op: str, nranks: int, size_bytes: int, link_gbps: float, latency_s: float, *,
                        pipeline_slice_bytes: int | None = None, intra_gbps: float | None = None,
                        gpus_per_server: int | None = None, server_of: Sequence[int] | None = None) -> float:
    """predict_time_s(build_schedule(op, "ring", nranks, size_bytes), ...) without building the
    schedule (2(n-1) n transfers: 2.1 M at 1,024 ranks): the same number, from the ring's
    structure. At step k of a phase rank i sends chunk (i - s) mod n to rank i+1 (s = k+1 in
    the reduce-scatter, k in the all-gather), and chunks differ by at most a byte, so a step's
    busiest NIC is the largest chunk that a sender of each link class carries."""
    if op not in RING_OPS:
        raise InputError("op", "one of " + ", ".join(RING_OPS), op)
    n = nranks
    rates, server = _rates_and_servers(n, link_gbps, latency_s, intra_gbps, gpus_per_server, server_of)
    if n < 2:
        return 0.0
    base, extra = divmod(size_bytes, n)
    cb = split_even(size_bytes, n)
    nxt = np.roll(np.arange(n), -1)
    cls = np.zeros(n, np.int64) if server is None else (np.asarray(server)[np.arange(n)] == np.asarray(server)[nxt]).astype(np.int64)
    shifts = {"rs": np.arange(1, n) % n, "ag": np.arange(0, n - 1)}

    def any_in(f, start, length):
        """For each start: any f[(start + c) mod n] for c in [0, length)."""
        if length <= 0:
            return np.zeros(len(start), bool)
        c = np.concatenate([[0], np.cumsum(np.concatenate([f, f]))])
        return c[start + length] - c[start] > 0

    def per_step(limit):
        """Seconds of each step's busiest NIC, bytes capped at limit, in step order."""
        out = []
        for phase in RING_OPS[op]:
            sh = shifts[phase]
            best = np.zeros(len(sh))
            for q in (0, 1):
                f = (cls == q).astype(np.int64)
                if not f.any():
                    continue
                big, small = any_in(f, sh, extra), any_in(f, (sh + extra) % n, n - extra)
                t = np.where(big, min(base + 1, limit) / rates[q], np.where(small, min(base, limit) / rates[q], 0.0))
                best = np.maximum(best, t)
            out.append(best)
        return np.concatenate(out)

    total = 0.0
    for step_s in per_step(np.inf).tolist():  # added in step order, as predict_time_s does
        total += latency_s + step_s
    if not pipeline_slice_bytes:
        return total
    fill = 0.0
    for per_slice in per_step(pipeline_slice_bytes).tolist():
        fill += latency_s + per_slice
    # What each sender (and so its receiver) moves in all: every chunk but its own in a reduce-scatter,
    # every chunk but its successor's in an all-gather.
    cba = np.asarray(cb, np.int64)
    sent = np.zeros(n, np.int64)
    if "rs" in RING_OPS[op]:
        sent += size_bytes - cba
    if "ag" in RING_OPS[op]:
        sent += size_bytes - cba[nxt]
    stream = max(float(x) for x in (sent / np.asarray(rates)[cls]).tolist())
    return min(total, fill + stream)
