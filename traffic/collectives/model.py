"""Analytical alpha-beta time of a schedule, for comparing the emulator against theory."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from badinput import InputError
from traffic.collectives.algorithms import ALGORITHMS, OPS, build_schedule, split_even
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


# ---- closed forms of other schedules: per step, every rank's bytes per link class -----------

def _steps_time_s(steps, n, rates, latency_s, slice_bytes):
    """predict_time_s's arithmetic on loads instead of transfers. steps yields, in step order,
    (tx, rx): arrays (2 link classes, n ranks) of the bytes each rank sends and receives in that
    step (a step that yields has at least one transfer). Maxima per class, then over classes, are
    the same floats as the maxima over keys (division by a rate is monotone)."""
    rate = np.asarray(rates, float)
    total = fill = 0.0
    moved = np.zeros((2, 2, n))  # tx/rx, class, rank: what busiest_total holds
    for tx, rx in steps:
        busiest = np.maximum(tx.max(axis=1), rx.max(axis=1))
        total += latency_s + float((busiest / rate).max())
        if slice_bytes:
            fill += latency_s + float((np.minimum(busiest, slice_bytes) / rate).max())
            moved[0] += tx
            moved[1] += rx
    if not slice_bytes:
        return total
    return min(total, fill + float((moved / rate[None, :, None]).max()))


def _same_server(server, n):
    """Group rank -> server id, each rank alone when there are no servers (all class 0)."""
    return np.arange(n) if server is None else np.unique(np.asarray(server), return_inverse=True)[1]


def _direct_steps(op, n, size_bytes, root, server):
    """The direct schedule's steps as loads: everyone sends to everyone at once (one or two steps)."""
    srv = _same_server(server, n)
    peers_in = np.bincount(srv)[srv] - 1  # same-server peers of each rank
    peers_out = n - 1 - peers_in

    def by_destination(x):
        """Each s sends x[d] to every d != s: (tx, rx) per class."""
        in_srv = np.bincount(srv, weights=x)[srv] - x
        tx = np.stack([x.sum() - x - in_srv, in_srv])
        return tx, np.stack([peers_out * x, peers_in * x])

    def by_source(x):
        """Each s sends x[s] to every d != s."""
        tx, rx = by_destination(x)
        return rx, tx

    cb = np.asarray(split_even(size_bytes, n), float)
    if op == "all_reduce":
        yield by_destination(cb)   # reduce-scatter: chunk d to its owner d
        yield by_source(cb)        # all-gather: own chunk to everyone
    elif op == "reduce_scatter":
        yield by_destination(cb)
    elif op == "all_gather":
        yield by_source(cb)
    elif op == "all_to_all":
        yield by_destination(cb)  # block s->d carries split_even(size, n)[d]
    else:  # broadcast from root, reduce to root: S to or from every other rank
        one = np.zeros(n)
        one[root] = size_bytes
        other = np.where(np.arange(n) == root, 0.0, float(size_bytes))
        peer = np.stack([(srv != srv[root]) * other, (srv == srv[root]) * other])
        at_root = np.stack([peers_out[root] * one, peers_in[root] * one])
        yield (at_root, peer) if op == "broadcast" else (peer, at_root)


def _ring_phase_steps(members, group_bytes, gather, cls, n):
    """Steps of rings run side by side (members: rings x L ranks, each rank in one ring): at step
    k member i sends group (i-k-1) mod L (reduce-scatter) or (i-k) mod L (all-gather) to i+1."""
    rings, length = members.shape
    dst = np.roll(members, -1, axis=1)
    c = cls(members, dst)
    flat_src, flat_dst = members.ravel() + n * c.ravel(), dst.ravel() + n * c.ravel()
    for k in range(length - 1):
        idx = (np.arange(length) - k - (0 if gather else 1)) % length
        b = group_bytes[:, idx].ravel()
        tx = np.bincount(flat_src, weights=b, minlength=2 * n).reshape(2, n)
        rx = np.bincount(flat_dst, weights=b, minlength=2 * n).reshape(2, n)
        yield tx, rx


def _hierarchical_steps(op, n, size_bytes, g, server):
    """Hierarchical all-reduce, reduce-scatter, all-gather: ring phases inside servers (blocks of g
    group ranks) and along rails, as algorithms._hierarchical orders them."""
    m = n // g
    servers = np.arange(n).reshape(m, g)  # servers[s, lr] = s*g + lr; rails are its transpose
    srv = _same_server(server, n)

    def cls(a, b):
        return (srv[a] == srv[b]).astype(np.int64)

    cb = np.asarray(split_even(size_bytes, n), float)
    if op == "all_reduce":
        piece = cb.reshape(g, m).sum(axis=1)  # pieces[lr] = chunks lr*m .. lr*m+m-1
        intra = np.broadcast_to(piece, (m, g))
        yield from _ring_phase_steps(servers, intra, False, cls, n)
        yield from _ring_phase_steps(servers.T, cb.reshape(g, m), False, cls, n)
        yield from _ring_phase_steps(servers.T, cb.reshape(g, m), True, cls, n)
        yield from _ring_phase_steps(servers, intra, True, cls, n)
        return
    by_rail = np.broadcast_to(cb.reshape(m, g).sum(axis=0), (m, g))  # rail lr's outputs, in each server
    if op == "reduce_scatter":
        yield from _ring_phase_steps(servers, by_rail, False, cls, n)
        yield from _ring_phase_steps(servers.T, cb.reshape(m, g).T, False, cls, n)
    else:
        yield from _ring_phase_steps(servers.T, cb.reshape(m, g).T, True, cls, n)
        yield from _ring_phase_steps(servers, by_rail, True, cls, n)


def _sendrecv_steps(n, size_bytes, server):
    srv = _same_server(server, n)
    nxt = np.roll(np.arange(n), -1)
    c = (srv == srv[nxt]).astype(np.int64)
    tx = np.zeros((2, n))
    tx[c, np.arange(n)] = size_bytes
    rx = np.zeros((2, n))
    rx[c, nxt] = size_bytes
    yield tx, rx


def _closed_steps(op, algorithm, n, size_bytes, root, g, server):
    """The loads of each step where the schedule has a closed form, else None."""
    if op == "sendrecv":  # the same exchange whatever the algorithm (build_schedule)
        return _sendrecv_steps(n, size_bytes, server)
    if algorithm == "direct":
        return _direct_steps(op, n, size_bytes, root, server)
    if algorithm == "hierarchical" and op in RING_OPS and isinstance(g, int) and g >= 1 and n % g == 0:
        return _hierarchical_steps(op, n, size_bytes, g, server)
    return None


def has_closed_form(op: str, algorithm: str) -> bool:
    """Whether collective_predict_time_s needs no schedule for this collective (any rank count)."""
    return (op == "sendrecv" or algorithm == "direct" or (algorithm in ("ring", "hierarchical") and op in RING_OPS))


def collective_predict_time_s(op: str, algorithm: str, nranks: int, size_bytes: int, link_gbps: float,
                              latency_s: float, *, root: int = 0, schedule_gpus_per_server: int | None = None,
                              pipeline_slice_bytes: int | None = None, intra_gbps: float | None = None,
                              gpus_per_server: int | None = None, server_of: Sequence[int] | None = None) -> float:
    """predict_time_s(build_schedule(op, algorithm, nranks, size_bytes, root=root,
    gpus_per_server=schedule_gpus_per_server), ...): the same number, from the schedule's structure
    where it has one (ring, direct, hierarchical all-reduce/reduce-scatter/all-gather, sendrecv:
    has_closed_form), so that a prediction at 4,096 ranks costs milliseconds, not millions of
    transfers; the schedule itself elsewhere (tree, halving-doubling, routed all-to-all)."""
    where = dict(pipeline_slice_bytes=pipeline_slice_bytes, intra_gbps=intra_gbps, gpus_per_server=gpus_per_server,
                 server_of=server_of)
    valid = (op in OPS and algorithm in ALGORITHMS and isinstance(nranks, int) and not isinstance(nranks, bool)
             and nranks >= 1 and isinstance(size_bytes, int) and size_bytes >= 0
             and isinstance(root, int) and 0 <= root < nranks)
    if valid and algorithm == "ring" and op in RING_OPS:
        return ring_predict_time_s(op, nranks, size_bytes, link_gbps, latency_s, **where)
    steps = None
    if valid and has_closed_form(op, algorithm):
        rates, server = _rates_and_servers(nranks, link_gbps, latency_s, intra_gbps, gpus_per_server, server_of)
        if nranks < 2:
            return 0.0
        steps = _closed_steps(op, algorithm, nranks, size_bytes, root, schedule_gpus_per_server, server)
    if steps is None:  # no closed form (or bad arguments: build_schedule says which)
        sched = build_schedule(op, algorithm, nranks, size_bytes, root=root, gpus_per_server=schedule_gpus_per_server)
        return predict_time_s(sched, link_gbps, latency_s, **where)
    return _steps_time_s(steps, nranks, rates, latency_s, pipeline_slice_bytes)
