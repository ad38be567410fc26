"""What a trace holds: op counts, bytes per collective and parallel dimension, and its critical
path. All of it works on the rank classes; ranks are expanded only for a trace whose classes are
not symmetric (see traffic.validate.ClassGraph.exact)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from traffic.collectives import build_schedule, effective_gpus_per_server, predict_time_s
from traffic.layout import FAMILIES, Layout
from traffic.limits import MAX_EXPANDED_OPS
from traffic.trace import Trace, expand, layout_from_meta
from traffic.validate import checked_graph, class_graph, group_combos, order_of

UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
RING_FORMULA_RANKS = 32  # larger ring collectives use their closed form: a 2048-rank schedule has 8M transfers
RING_STEPS = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}


def ring_time_s(op: str, n: int, size_bytes: int, link_gbps: float, latency_s: float,
                intra_gbps: float | None = None, gpus_per_server: int | None = None) -> float:
    """predict_time_s of a lock-step ring all-reduce, all-gather or reduce-scatter without building
    it: (2)(n-1) steps, each moving the largest of n near-equal chunks over the slowest hop in use
    (a hop inside a server when the whole group is in one). Equal to the schedule's figure to a byte
    per step (tests/unit/traffic/test_traffic_cli.py)."""
    chunk = -(-size_bytes // n)
    rate = intra_gbps if intra_gbps and gpus_per_server and n <= gpus_per_server else link_gbps
    return RING_STEPS[op] * (n - 1) * (latency_s + chunk * 8 / (rate * 1e9))


def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB': binary units, as NCCL and nccl-tests size their buffers."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in UNITS:
        n /= 1024
        if n < 1024 or unit == UNITS[-1]:
            return f"{n:.1f} {unit}"


def group_kinds(t: Trace) -> dict:
    """group ref (family or explicit name) -> its parallel dimension: a layout family is itself; an
    explicit group is the family whose group it equals under the layout (or the one meta states),
    "world" when it holds every rank, else its name up to the first '-'."""
    lay = t.layout or layout_from_meta(t)
    out = {f: f for f in FAMILIES}
    full = Layout(lay.tp, lay.dp, lay.pp, lay.ep, lay.order, FAMILIES) if lay is not None else None
    for name, members in t.explicit.items():
        kind = None
        if full is not None and members:
            parsed = full.parse_group(name)  # a family's own name for exactly its members says which
            if parsed is not None and full.group_members(*parsed) == list(members):
                kind = parsed[0]
            for f in FAMILIES if kind is None else ():
                if full.family_size(f) == len(members) and \
                        full.group_members(f, int(full.group_index(f, members[0]))) == list(members):
                    kind = f
                    break
        if kind is None and len(members) == t.nranks:
            kind = "world"
        out[name] = kind or str(name).split("-", 1)[0]
    return out


def group_kind(name: str | None) -> str:
    """tp-p0-d1 -> tp; world -> world (by name only; see group_kinds for a trace's groups)."""
    return (name or "").split("-", 1)[0]


def op_counts(t: Trace) -> Counter:
    """Ops of every rank by kind."""
    out: Counter = Counter()
    for c in t.classes:
        for o in c.ops:
            out[o.kind] += len(c)
    return out


def collective_table(t: Trace) -> dict:
    """(dimension, op) -> [instances, bytes, smallest size, largest size]. A collective counts once
    per instance (group, id) with its size S; point-to-point traffic once per send, under
    ("p2p", "send/recv")."""
    kinds = group_kinds(t)
    lay = t.layout
    out: dict = {}
    seen: set = set()
    gidx: dict = {}
    spans: dict = {}
    shared_ids: dict = {}  # (family, id) -> classes, where a family's groups span classes

    def add(key, n, size):
        acc = out.setdefault(key, [0, 0, size, size])
        acc[0] += n
        acc[1] += n * size
        acc[2], acc[3] = min(acc[2], size), max(acc[3], size)

    for c, cls in enumerate(t.classes):
        for o in cls.ops:
            if o.kind == "send":
                add(("p2p", "send/recv"), len(cls), o.size_bytes)
            elif o.kind != "collective":
                continue
            elif lay is not None and o.group in lay.families:
                f = o.group
                if f not in spans:
                    spans[f] = bool((group_combos(t, f, t.class_array()) > len(t.classes)).any())
                if (f, c) not in gidx:
                    gidx[(f, c)] = np.unique(lay.group_index(f, cls.ranks))
                if spans[f]:
                    shared_ids.setdefault((f, o.id), (o, []))[1].append(c)
                else:
                    add((f, o.op), gidx[(f, c)].size, o.size_bytes)
            elif (o.group, o.id) not in seen:
                seen.add((o.group, o.id))
                add((kinds.get(o.group, group_kind(o.group)), o.op), 1, o.size_bytes)
    for (f, _), (o, cs) in shared_ids.items():
        add((f, o.op), np.unique(np.concatenate([gidx[(f, c)] for c in cs])).size, o.size_bytes)
    return dict(sorted(out.items()))


def bytes_by_collective(t: Trace) -> dict[tuple[str, str], tuple[int, int]]:
    """(dimension, op) -> (instances, bytes); see collective_table."""
    return {k: (v[0], v[1]) for k, v in collective_table(t).items()}


@dataclass
class CriticalPath:
    total_s: float
    compute_s: float
    comm_s: float
    steps: list[tuple[str, float]]  # (description, seconds) along the path, in order
    per_class: bool = True          # computed on the classes (False: on every rank)


class TooLarge(Exception):
    """A per-rank computation beyond MAX_EXPANDED_OPS."""


def critical_path(t: Trace, link_gbps: float = 400.0, latency_s: float = 5e-6,
                  intra_gbps: float | None = None) -> CriticalPath:
    """Longest path through the ops merged across ranks (a collective starts when its last member
    is ready). Compute takes its duration_s; communication its alpha-beta time on `link_gbps` NICs,
    with no contention between concurrent collectives: a lower bound on iteration time.
    With `intra_gbps` and meta gpus_per_server, transfers inside a server go at that rate.
    On symmetric classes this runs on the class-level graph, where it is the same path; otherwise
    on every rank (TooLarge beyond MAX_EXPANDED_OPS)."""
    g, order = checked_graph(t) or _graph_and_order(t)
    cost = _Costs(t, link_gbps, latency_s, intra_gbps)
    if not g.exact or len(order) != len(g.keys) or not cost.uniform(g):
        if t.op_count() > MAX_EXPANDED_OPS:
            raise TooLarge(f"{t.op_count()} ops on ranks whose classes are not symmetric")
        if all(len(c) == 1 for c in t.classes):
            raise ValueError("the trace has a dependency cycle")  # validated traces never get here
        return _replace(critical_path(expand(t), link_gbps, latency_s, intra_gbps), per_class=False)
    keys, preds, info = g.keys, g.preds, g.info
    seconds = [cost.of(k, i) for k, i in zip(keys, info)]
    finish = [0.0] * len(keys)
    best_pred: list = [None] * len(keys)
    for k in order:
        start, via = 0.0, None
        for p in preds[k]:
            if finish[p] > start:
                start, via = finish[p], p
        finish[k] = start + seconds[k]
        best_pred[k] = via
    if not keys:
        return CriticalPath(0.0, 0.0, 0.0, [])
    end = max(range(len(keys)), key=finish.__getitem__)
    path = []
    while end is not None:
        path.append(end)
        end = best_pred[end]
    path.reverse()
    steps = [(_describe(t, keys[k], info[k]), seconds[k]) for k in path]
    compute = sum(seconds[k] for k in path if keys[k][0] == "c")
    total = finish[path[-1]]
    return CriticalPath(total, compute, total - compute, steps)


def _graph_and_order(t: Trace):
    g = class_graph(t)
    return g, order_of(g.preds)


def _replace(cp: CriticalPath, **kw) -> CriticalPath:
    return CriticalPath(**{**cp.__dict__, **kw})


class _Costs:
    """Seconds of a class-graph node; a collective's come from a representative group."""

    def __init__(self, t: Trace, link_gbps, latency_s, intra_gbps):
        self.t, self.link, self.lat, self.intra = t, link_gbps, latency_s, intra_gbps
        self.gps = t.meta.get("gpus_per_server")
        self.cache: dict = {}
        self.group_cache: dict = {}

    def group(self, c, ref):
        """(members of a representative group, its effective GPUs per server, all groups alike)."""
        key = (c, ref)
        if key in self.group_cache:
            return self.group_cache[key]
        t, lay = self.t, self.t.layout
        if lay is not None and ref in lay.families:
            firsts = np.unique(lay.group_first(ref, t.classes[c].ranks))
            members = lay.group_members(ref, int(lay.group_index(ref, firsts[0])))
            g = effective_gpus_per_server(members, self.gps)
            alike = True
            if self.gps:
                # A family's groups are one pattern of offsets moved around: where the first rank
                # sits in its server decides how the group sees servers.
                pick = np.unique(firsts % self.gps, return_index=True)[1]
                vals = {effective_gpus_per_server(lay.group_members(ref, int(lay.group_index(ref, firsts[i]))),
                                                  self.gps) for i in pick.tolist()}
                alike = len(vals) == 1
        else:
            members, g, alike = t.explicit[ref], effective_gpus_per_server(t.explicit[ref], self.gps), True
        self.group_cache[key] = (members, g, alike)
        return self.group_cache[key]

    def uniform(self, g) -> bool:
        return all(self.group(c, o.group)[2] for k, (c, o) in zip(g.keys, g.info) if k[0] == "g")

    def of(self, key, info) -> float:
        c, o = info
        if o.kind == "compute":
            return o.duration_s
        if o.kind in ("send", "recv"):
            return self.lat + o.size_bytes * 8 / (self.link * 1e9)
        members, g, _ = self.group(c, o.group)
        alg = o.algorithm or "ring"
        if alg == "hierarchical" and g is None:
            g = len(members)  # layout unknown: one server
        k = (o.op, alg, len(members), o.size_bytes, g, o.root or 0)
        if k not in self.cache and alg == "ring" and o.op in RING_STEPS and len(members) > RING_FORMULA_RANKS:
            self.cache[k] = ring_time_s(o.op, len(members), o.size_bytes, self.link, self.lat, self.intra, g)
        if k not in self.cache:
            s = build_schedule(o.op, alg, len(members), o.size_bytes, root=o.root or 0,
                               gpus_per_server=g if alg == "hierarchical" else None)
            split = dict(intra_gbps=self.intra, gpus_per_server=g) if self.intra and g else {}
            self.cache[k] = predict_time_s(s, self.link, self.lat, **split)
        return self.cache[k]


def _describe(t: Trace, key, info) -> str:
    c, o = info
    cls = t.classes[c]
    one = len(cls) == 1
    if key[0] == "c":
        where = f"rank {int(cls.ranks[0])}" if one else cls.label()
    elif key[0] == "g":
        where = t.group_of(int(cls.ranks[0]), o.group) if one or o.group in t.explicit else \
            f"{o.group} groups of {cls.label()}"
    elif one:  # o is the pair's send (ClassGraph.info keeps the send side)
        a = int(cls.ranks[0])
        where = f"{a}->{t.peer_of(a, o.peer)}"
    else:
        dst = t.class_of(t.peer_of(int(cls.ranks[0]), o.peer))
        where = f"{cls.label()}->{t.classes[dst].label() if dst is not None else '?'}"
    return f"{o.label or o.id} [{where}]"


def fold(steps: list[tuple[str, float]]) -> list[tuple[str, float, int]]:
    """Identical steps (same description and seconds) as one, with their count, heaviest first."""
    count: Counter = Counter(steps)
    return sorted(((d, s, n) for (d, s), n in count.items()), key=lambda x: (-x[1] * x[2], x[0]))


def summary_lines(t: Trace, link_gbps: float = 400.0, latency_s: float = 5e-6, top: int = 10,
                  intra_gbps: float | None = None) -> list[str]:
    """The text `dtnet trace show` prints."""
    lines = []
    counts = op_counts(t)
    meta = ", ".join(f"{k}={v}" for k, v in t.meta.items() if not isinstance(v, (dict, list)))
    lines.append(f"{t.nranks} ranks, {len(t.groups)} groups, {sum(counts.values())} ops ({meta})")
    lines.append(f"held as {len(t.classes)} rank classes (distinct op streams) of {t.distinct_ops()} distinct ops")
    lay = t.layout
    if lay is not None:
        ep = f" (ep {lay.ep})" if lay.ep > 1 else ""
        fams = ", ".join(f"{f} {lay.group_count(f)} of {lay.family_size(f)}" for f in lay.families) or "none"
        lines.append(f"layout: tp {lay.tp} x dp {lay.dp}{ep} x pp {lay.pp}, order {'-'.join(lay.order)}; "
                     f"groups by rule: {fams}")
    lines.append("ops: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("compute", "collective", "send", "recv")))
    lines.append(f"{'group':<8} {'op':<16} {'instances':>10} {'size':>21} {'total':>12}")
    for (kind, op), (n, b, lo, hi) in collective_table(t).items():
        size = fmt_bytes(lo) if lo == hi else f"{fmt_bytes(lo)}..{fmt_bytes(hi)}"
        lines.append(f"{kind:<8} {op:<16} {n:>10} {size:>21} {fmt_bytes(b):>12}")
    try:
        cp = critical_path(t, link_gbps, latency_s, intra_gbps)
    except TooLarge as e:
        lines.append(f"critical path: not computed ({e}; the per-rank limit is {MAX_EXPANDED_OPS})")
        return lines
    intra = f", {intra_gbps:g} Gb/s inside a server" if intra_gbps else ""
    lines.append(f"critical path: {cp.total_s:.6f} s over {len(cp.steps)} ops (compute {cp.compute_s:.6f} s, "
                 f"communication {cp.comm_s:.6f} s; alpha-beta at {link_gbps:g} Gb/s{intra}, "
                 f"{latency_s * 1e6:g} us, no contention)")
    for desc, s, n in fold(cp.steps)[:top]:
        times = f"x{n}" if n > 1 else ""
        lines.append(f"  {s:.6f} s {times:>5}  {desc}")
    return lines
