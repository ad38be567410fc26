"""Shared by the importers: turns per-rank event streams into a Trace with matched ids.

Collectives match across ranks by order within their group (NCCL runs a communicator's
collectives in issue order); sends and recvs match by (src, dst, tag) and order.
"""
from __future__ import annotations

from badinput import InputError, files
from traffic.collectives import ALGORITHMS
from traffic.trace import Op, Trace


def read_json_gz(path, key: str):
    """JSON, or gzipped JSON (torch.profiler writes FILE.json.gz), as one InputError on failure."""
    return files.read_json(path, key, gunzip=True)


class Assembler:
    def __init__(self, nranks: int, files: list[str], algorithm: str = "ring"):
        if algorithm not in ALGORITHMS:
            raise InputError("algorithm", "one of " + ", ".join(ALGORITHMS), algorithm)
        self.nranks, self.files, self.algorithm = nranks, files, algorithm
        self.ops: dict[int, list[Op]] = {r: [] for r in range(nranks)}
        self.ids: dict[int, dict] = {r: {} for r in range(nranks)}  # source key -> op id
        self.groups: dict[str, list[int]] = {}
        self._by_ranks: dict[tuple, str] = {}
        self._count: dict[tuple, int] = {}
        self._sig: dict[tuple, tuple] = {}  # (group, id) -> (op, size, rank, where)
        self._pending: list[tuple] = []  # (rank, op, source dep keys, where): resolved at the end

    def group(self, ranks, name=None) -> str:
        """The trace's name for this rank list (registered on first use)."""
        key = tuple(ranks)
        if key in self._by_ranks:
            return self._by_ranks[key]
        name = name or ("world" if list(key) == list(range(self.nranks)) else "g" + "_".join(map(str, key)))
        while name in self.groups:
            name += "'"
        self.groups[name] = list(key)
        self._by_ranks[key] = name
        return name

    def _resolve(self, rank, deps, where):
        out = []
        for d in deps:
            if d not in self.ids[rank]:
                raise InputError(f"{where}.deps", "ids of nodes in the same file", d, file=self.files[rank])
            out.append(self.ids[rank][d])
        return tuple(dict.fromkeys(out))

    def _add(self, rank, key, op: Op, deps, where):
        if key in self.ids[rank]:
            raise InputError(f"{where}", "a node id unique within the file", key, file=self.files[rank])
        self.ids[rank][key] = op.id
        self.ops[rank].append(op)
        if deps:
            self._pending.append((rank, op, deps, where))
        return op.id

    def compute(self, rank, key, duration_s, deps=(), label="", where="node", iteration=None):
        return self._add(rank, key, Op(f"n{key}", "compute", duration_s=duration_s, label=label, iteration=iteration),
                         deps, where)

    def collective(self, rank, key, op, group, size_bytes, deps=(), label="", where="node", root=None,
                   iteration=None):
        if rank not in self.groups[group]:
            raise InputError(f"{where}", f"a group that holds rank {rank}", f"{group} = {self.groups[group]}",
                             file=self.files[rank])
        k = self._count.get((rank, group), 0)
        self._count[(rank, group)] = k + 1
        oid = f"{group}#{k}"
        first = self._sig.setdefault((group, oid), (op, size_bytes, rank, where))
        if first[:2] != (op, size_bytes):
            raise InputError(where, f"collective {k} of group {group} to be {first[0]} of {first[1]} bytes as on "
                             f"rank {first[2]} ({self.files[first[2]]})", f"{op} of {size_bytes} bytes",
                             file=self.files[rank])
        return self._add(rank, key, Op(oid, "collective", op=op, algorithm=self.algorithm, group=group,
                                       size_bytes=size_bytes, label=label, root=root, iteration=iteration),
                         deps, where)

    def p2p(self, rank, key, kind, peer, size_bytes, deps=(), label="", where="node", tag=0, iteration=None):
        if not isinstance(peer, int) or not 0 <= peer < self.nranks or peer == rank:
            raise InputError(f"{where}.peer", f"another rank in 0..{self.nranks - 1}", peer, file=self.files[rank])
        src, dst = (rank, peer) if kind == "send" else (peer, rank)
        k = self._count.get((src, dst, tag, kind), 0)
        self._count[(src, dst, tag, kind)] = k + 1
        oid = f"p2p{src}>{dst}#{tag}#{k}"
        return self._add(rank, key, Op(oid, kind, size_bytes=size_bytes, peer=peer, label=label, iteration=iteration),
                         deps, where)

    def trace(self, meta) -> Trace:
        """The trace, after checking that every group member joined every collective of its group."""
        for rank, op, deps, where in self._pending:
            op.deps = self._resolve(rank, deps, where)
        joined: dict[tuple, set] = {}
        for rank, ops in self.ops.items():
            for o in ops:
                if o.kind == "collective":
                    joined.setdefault((o.group, o.id), set()).add(rank)
        for (group, oid), ranks in joined.items():
            missing = sorted(set(self.groups[group]) - ranks)
            if missing:
                raise InputError(f"collective {oid}", f"every member of {group} to take part",
                                 f"none on rank {missing[0]}", file=self.files[missing[0]])
        sends = {(o.id, r, o.peer): o.size_bytes for r, ops in self.ops.items() for o in ops if o.kind == "send"}
        recvs = {(o.id, o.peer, r): o.size_bytes for r, ops in self.ops.items() for o in ops if o.kind == "recv"}
        for key in sends.keys() ^ recvs.keys():
            oid, src, dst = key
            side, rank = ("recv", dst) if key in sends else ("send", src)
            raise InputError(f"{'send' if side == 'recv' else 'recv'} {oid}", f"a matching {side} on rank {rank}",
                             "none", file=self.files[rank])
        trace = Trace(nranks=self.nranks, groups=self.groups, ops=self.ops, meta=meta)
        try:
            trace.validate()
        except InputError as e:
            raise InputError(e.key, e.expected, e.found, file=", ".join(self.files)) from None
        return trace


OVERLAP_TOLERANCE_US = 50.0  # no member leaves a collective before every member entered it (one clock)
MAX_SEARCH_STEPS = 200_000


def infer_groups(seqs: dict, rank_pgs: dict, pg_ranks: dict, files: dict, units_per_group: int | None = None,
                 with_count: bool = False):
    """Which process group each collective used, when the events do not say (gloo's CPU events
    carry no group). seqs: rank -> [(op, size, unit, start_us, end_us)] in issue order, where
    collectives of one unit (a gloo worker thread: each belongs to one group) share a group;
    rank_pgs: rank -> the groups it belongs to; pg_ranks: group -> its ranks.

    The rule that decides: the members of a group run its collectives in one order, with the
    same op and size (how NCCL and gloo match them), and no member leaves an instance before
    every member has entered it (checked when the clocks allow: all ranks on one host). When
    several assignments still fit, the smallest groups are preferred: in a training job the
    subgroups (tensor, data parallel) carry the collectives, the world group rarely does.
    units_per_group caps the units one group has on a rank (gloo: its worker threads, 2 by
    default); the cap and the clocks are dropped, in that order, if nothing fits with them.
    Returns (rank -> [group per collective], note); the note says what was inferred.
    """
    ranks = sorted(set(seqs) | set(rank_pgs))
    cands = {r: sorted(rank_pgs.get(r, ()), key=lambda g: (len(pg_ranks[g]), g)) for r in ranks}
    flat = [(r, i) for r in ranks for i in [*range(len(seqs.get(r, ()))), None]]
    everywhere = ", ".join(files[r] for r in sorted(files))
    for cap, use_time in ((units_per_group, True), (units_per_group, False), (None, True), (None, False)):
        found, steps = _search(flat, seqs, cands, rank_pgs, use_time, cap)
        if found:
            note = "process groups inferred from gloo worker threads and the order, op and size of collectives"
            if len(found) > 1:
                note += " (several assignments fit: the one with the smallest groups kept)"
            if not use_time:
                note += " (their times do not overlap across ranks: clocks apart?)"
            if cap is None and units_per_group:
                note += f" (a group with more than {units_per_group} worker threads)"
            out = {r: [] for r in seqs}
            for (r, i), g in zip(flat, found[0]):
                if i is not None:
                    out[r].append(g)
            return (out, note, len(found)) if with_count else (out, note)
        if steps > MAX_SEARCH_STEPS:
            raise InputError("process groups", f"collectives whose groups can be told apart within "
                             f"{MAX_SEARCH_STEPS} steps (record with the NCCL backend, whose record_param_comms "
                             "names the group)", "too many candidates", file=everywhere)
    raise InputError("process groups", "collectives that match, in order, op and size, across the ranks of "
                     "the groups in distributedInfo.pg_config", "no assignment fits", file=everywhere)


def _search(flat, seqs, cands, rank_pgs, use_time, cap):
    canon, owner, count, unit_pg, units = {}, {}, {}, {}, {}
    trail, choice, found = [], [None] * len(flat), []

    def undo(mark):
        while len(trail) > mark:
            kind, a, b = trail.pop()
            if kind == "canon":
                del canon[a], owner[a]
            elif kind == "append":
                canon[a].pop()
            elif kind == "count":
                count[a] = b
            elif kind == "unit":
                units[(a[0], unit_pg.pop(a))] -= 1
            elif kind == "span":
                a[2], a[3] = b

    def apply(k, g):
        r, i = flat[k]
        if i is None:  # end of a rank: its groups must hold all the instances set so far
            for pg in rank_pgs.get(r, ()):
                if pg in canon:
                    if owner[pg] != r and count.get((r, pg), 0) != len(canon[pg]):
                        return False
                else:
                    canon[pg], owner[pg] = [], r
                    trail.append(("canon", pg, None))
            return True
        op, size, unit, ts, end = seqs[r][i]
        if (r, unit) not in unit_pg:
            if cap is not None and units.get((r, g), 0) >= cap:
                return False
            unit_pg[(r, unit)] = g
            units[(r, g)] = units.get((r, g), 0) + 1
            trail.append(("unit", (r, unit), None))
        n = count.get((r, g), 0)
        if g in canon and owner[g] != r:
            if n >= len(canon[g]) or tuple(canon[g][n][:2]) != (op, size):
                return False
            inst = canon[g][n]
            lo, hi = max(inst[2], ts), min(inst[3], end)
            if use_time and lo > hi + OVERLAP_TOLERANCE_US:
                return False
            trail.append(("span", inst, (inst[2], inst[3])))
            inst[2], inst[3] = lo, hi
        else:
            if g not in canon:
                canon[g], owner[g] = [], r
                trail.append(("canon", g, None))
            canon[g].append([op, size, ts, end])
            trail.append(("append", g, None))
        trail.append(("count", (r, g), n))
        count[(r, g)] = n + 1
        choice[k] = g
        return True

    def options(k):
        r, i = flat[k]
        if i is None:
            return [None]
        unit = seqs[r][i][2]
        return [unit_pg[(r, unit)]] if (r, unit) in unit_pg else cands[r]

    frames, steps = [[0, options(0), 0, 0]] if flat else [], 0
    while frames and len(found) < 2:
        f = frames[-1]
        undo(f[3])
        moved = False
        while f[2] < len(f[1]):
            g = f[1][f[2]]
            f[2] += 1
            steps += 1
            if apply(f[0], g):
                moved = True
                break
            undo(f[3])
        if steps > MAX_SEARCH_STEPS:
            return [], steps
        if not moved:
            frames.pop()
            continue
        nxt = f[0] + 1
        if nxt == len(flat):
            found.append(list(choice))
            continue
        frames.append([nxt, options(nxt), 0, len(trail)])
    return found, steps
