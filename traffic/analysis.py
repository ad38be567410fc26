"""What a trace holds: op counts, bytes per collective type and group, and its critical path."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from traffic.collectives import build_schedule, effective_gpus_per_server, predict_time_s
from traffic.trace import Trace, dependency_graph, topological_order


def group_kind(name: str | None) -> str:
    """tp-p0-d1 -> tp; world -> world."""
    return (name or "").split("-", 1)[0]


def op_counts(t: Trace) -> Counter:
    return Counter(o.kind for ops in t.ops.values() for o in ops)


def bytes_by_collective(t: Trace) -> dict[tuple[str, str], tuple[int, int]]:
    """(group kind, op) -> (instances, bytes). A collective counts once per instance, with its size S;
    point-to-point traffic counts once per send, under ("p2p", "send/recv")."""
    out: dict[tuple[str, str], list[int]] = {}
    seen = set()
    for rank, ops in t.ops.items():
        for o in ops:
            if o.kind == "collective":
                if (o.group, o.id) in seen:
                    continue
                seen.add((o.group, o.id))
                key = (group_kind(o.group), o.op)
            elif o.kind == "send":
                key = ("p2p", "send/recv")
            else:
                continue
            acc = out.setdefault(key, [0, 0])
            acc[0] += 1
            acc[1] += o.size_bytes
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


@dataclass
class CriticalPath:
    total_s: float
    compute_s: float
    comm_s: float
    steps: list[tuple[str, float]]  # (description, seconds) along the path, in order


def critical_path(t: Trace, link_gbps: float = 400.0, latency_s: float = 5e-6,
                  intra_gbps: float | None = None) -> CriticalPath:
    """Longest path through the ops merged across ranks (a collective starts when its last member
    is ready). Compute takes its duration_s; communication its alpha-beta time on `link_gbps` NICs,
    with no contention between concurrent collectives: a lower bound on iteration time.
    With `intra_gbps` and meta gpus_per_server, transfers inside a server go at that rate."""
    gps = t.meta.get("gpus_per_server")
    info: dict = {}
    for rank, ops in t.ops.items():
        for o in ops:
            key = t.node_key(rank, o)
            if key not in info:
                info[key] = o
    cache: dict = {}

    def cost(o) -> float:
        if o.kind == "compute":
            return o.duration_s
        if o.kind in ("send", "recv"):
            return latency_s + o.size_bytes * 8 / (link_gbps * 1e9)
        ranks = t.groups[o.group]
        alg = o.algorithm or "ring"
        g = effective_gpus_per_server(ranks, gps)
        if alg == "hierarchical" and g is None:
            g = len(ranks)  # layout unknown: one server
        k = (o.op, alg, len(ranks), o.size_bytes, g, o.root or 0)
        if k not in cache:
            s = build_schedule(o.op, alg, len(ranks), o.size_bytes, root=o.root or 0,
                               gpus_per_server=g if alg == "hierarchical" else None)
            split = dict(intra_gbps=intra_gbps, gpus_per_server=g) if intra_gbps and g else {}
            cache[k] = predict_time_s(s, link_gbps, latency_s, **split)
        return cache[k]

    preds = dependency_graph(t)
    finish: dict = {}
    best_pred: dict = {}
    for k in topological_order(preds):
        start, via = 0.0, None
        for p in preds[k]:
            if finish[p] > start:
                start, via = finish[p], p
        finish[k] = start + cost(info[k])
        best_pred[k] = via
    if not finish:
        return CriticalPath(0.0, 0.0, 0.0, [])
    end = max(finish, key=finish.get)
    path = []
    while end is not None:
        path.append(end)
        end = best_pred[end]
    path.reverse()
    steps = [(_describe(k, info[k]), cost(info[k])) for k in path]
    compute = sum(s for k, (_, s) in zip(path, steps) if info[k].kind == "compute")
    total = finish[path[-1]] if path else 0.0
    return CriticalPath(total, compute, total - compute, steps)


def _describe(key, o) -> str:
    where = f"rank {key[1]}" if key[0] == "compute" else o.group if key[0] == "coll" else f"{key[1]}->{key[2]}"
    return f"{o.label or o.id} [{where}]"


def summary_lines(t: Trace, link_gbps: float = 400.0, latency_s: float = 5e-6, top: int = 10,
                  intra_gbps: float | None = None) -> list[str]:
    """The text `dtnet trace show` prints."""
    lines = []
    counts = op_counts(t)
    meta = ", ".join(f"{k}={v}" for k, v in t.meta.items() if not isinstance(v, (dict, list)))
    lines.append(f"{t.nranks} ranks, {len(t.groups)} groups, {sum(counts.values())} ops ({meta})")
    lines.append("ops: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("compute", "collective", "send", "recv")))
    lines.append(f"{'group':<8} {'op':<16} {'instances':>10} {'bytes':>18}")
    for (kind, op), (n, b) in bytes_by_collective(t).items():
        lines.append(f"{kind:<8} {op:<16} {n:>10} {b:>18}")
    cp = critical_path(t, link_gbps, latency_s, intra_gbps)
    intra = f", {intra_gbps:g} Gb/s inside a server" if intra_gbps else ""
    lines.append(f"critical path: {cp.total_s:.6f} s over {len(cp.steps)} ops (compute {cp.compute_s:.6f} s, "
                 f"communication {cp.comm_s:.6f} s; alpha-beta at {link_gbps:g} Gb/s{intra}, "
                 f"{latency_s * 1e6:g} us, no contention)")
    heaviest = sorted(cp.steps, key=lambda s: -s[1])[:top]
    for desc, s in heaviest:
        lines.append(f"  {s:.6f} s  {desc}")
    return lines
