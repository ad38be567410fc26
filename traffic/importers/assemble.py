"""Shared by the importers: turns per-rank event streams into a Trace with matched ids.

Collectives match across ranks by order within their group (NCCL runs a communicator's
collectives in issue order); sends and recvs match by (src, dst, tag) and order.
"""
from __future__ import annotations

from badinput import InputError
from traffic.collectives import ALGORITHMS
from traffic.trace import Op, Trace


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

    def compute(self, rank, key, duration_s, deps=(), label="", where="node"):
        return self._add(rank, key, Op(f"n{key}", "compute", duration_s=duration_s, label=label), deps, where)

    def collective(self, rank, key, op, group, size_bytes, deps=(), label="", where="node", root=None):
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
                                       size_bytes=size_bytes, label=label, root=root), deps, where)

    def p2p(self, rank, key, kind, peer, size_bytes, deps=(), label="", where="node", tag=0):
        if not isinstance(peer, int) or not 0 <= peer < self.nranks or peer == rank:
            raise InputError(f"{where}.peer", f"another rank in 0..{self.nranks - 1}", peer, file=self.files[rank])
        src, dst = (rank, peer) if kind == "send" else (peer, rank)
        k = self._count.get((src, dst, tag, kind), 0)
        self._count[(src, dst, tag, kind)] = k + 1
        oid = f"p2p{src}>{dst}#{tag}#{k}"
        return self._add(rank, key, Op(oid, kind, size_bytes=size_bytes, peer=peer, label=label), deps, where)

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
