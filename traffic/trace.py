"""Per-rank op traces: the workload each emulated GPU replays, and their versioned JSON file."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields

from traffic.collectives import ALGORITHMS, OPS
from traffic.errors import InputError

FORMAT = "dtnet-trace"
VERSION = 1
KINDS = ("compute", "collective", "send", "recv")


@dataclass(slots=True)
class Op:
    """One entry of a rank's stream. Builders share Op objects between ranks: treat them as read-only."""

    id: str                      # unique within a rank; shared by every rank in one collective or send/recv pair
    kind: str                    # compute | collective | send | recv
    deps: tuple[str, ...] = ()   # ids of ops on the same rank that must finish first
    duration_s: float = 0.0      # compute only, real-cluster seconds
    op: str | None = None        # collective op name
    algorithm: str | None = None
    group: str | None = None     # communicator group name (key of Trace.groups)
    size_bytes: int = 0
    peer: int | None = None      # global rank, send/recv only
    iteration: int | None = None
    label: str = ""
    root: int | None = None      # group-local root rank, broadcast/reduce only


_FIELDS = tuple(f.name for f in fields(Op))
_DEFAULTS = {f.name: f.default for f in fields(Op)}


@dataclass
class Trace:
    nranks: int
    groups: dict[str, list[int]]
    ops: dict[int, list[Op]]
    meta: dict = field(default_factory=dict)

    def validate(self, file=None) -> None:
        """Raises InputError for anything an agent could not replay: see docs/trace-format.md."""
        _validate(self, file)

    def node_key(self, rank: int, o: Op):
        """The identity of an op across ranks: one node per collective instance or send/recv pair."""
        if o.kind == "collective":
            return ("coll", o.group, o.id)
        if o.kind == "send":
            return ("p2p", rank, o.peer, o.id)
        if o.kind == "recv":
            return ("p2p", o.peer, rank, o.id)
        return ("compute", rank, o.id)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _validate(t: Trace, file):
    def bad(key, expected, found):
        raise InputError(key, expected, found, file=file)

    if not _is_int(t.nranks) or t.nranks < 1:
        bad("nranks", "an integer >= 1", t.nranks)
    members: dict[str, set] = {}
    for name, ranks in t.groups.items():
        if not isinstance(ranks, list) or not ranks or not all(_is_int(r) for r in ranks):
            bad(f"groups.{name}", "a non-empty list of ranks", ranks)
        out = [r for r in ranks if not 0 <= r < t.nranks]
        if out:
            bad(f"groups.{name}", f"ranks in 0..{t.nranks - 1}", out[0])
        if len(set(ranks)) != len(ranks):
            bad(f"groups.{name}", "distinct ranks", ranks)
        members[name] = set(ranks)
    colls: dict[tuple, tuple] = {}   # (group, id) -> (op, algorithm, size, first rank seen)
    coll_ranks: dict[tuple, set] = {}
    p2p: dict[tuple, list] = {}      # (src, dst, id) -> [send size, recv size]
    for rank, ops in t.ops.items():
        if not _is_int(rank) or not 0 <= rank < t.nranks:
            bad("ops", f"ranks in 0..{t.nranks - 1}", rank)
        ids = set()
        for i, o in enumerate(ops):
            where = f"ops.{rank}[{i}]"
            if not isinstance(o.id, str) or not o.id:
                bad(f"{where}.id", "a non-empty string", o.id)
            if o.id in ids:
                bad(f"{where}.id", "an id unique within the rank", o.id)
            ids.add(o.id)
            if o.kind not in KINDS:
                bad(f"{where}.kind", "one of " + ", ".join(KINDS), o.kind)
            if not _is_int(o.size_bytes) or o.size_bytes < 0:
                bad(f"{where}.size_bytes", "an integer >= 0", o.size_bytes)
            if not isinstance(o.duration_s, (int, float)) or not math.isfinite(o.duration_s) or o.duration_s < 0:
                bad(f"{where}.duration_s", "a finite number >= 0", o.duration_s)
            if o.iteration is not None and (not _is_int(o.iteration) or o.iteration < 0):
                bad(f"{where}.iteration", "an integer >= 0 or null", o.iteration)
            if not isinstance(o.label, str):
                bad(f"{where}.label", "a string", o.label)
            if o.kind == "collective":
                if o.op not in OPS:
                    bad(f"{where}.op", "one of " + ", ".join(OPS), o.op)
                if o.algorithm is not None and o.algorithm not in ALGORITHMS:
                    bad(f"{where}.algorithm", "one of " + ", ".join(ALGORITHMS), o.algorithm)
                if o.group not in members:
                    bad(f"{where}.group", "a group named in groups", o.group)
                if rank not in members[o.group]:
                    bad(f"{where}.group", f"a group that holds rank {rank}", o.group)
                if o.root is not None and (not _is_int(o.root) or not 0 <= o.root < len(t.groups[o.group])):
                    bad(f"{where}.root", f"a group-local rank in 0..{len(t.groups[o.group]) - 1}", o.root)
                key = (o.group, o.id)
                sig = (o.op, o.algorithm, o.size_bytes, o.root)
                if colls.setdefault(key, sig + (rank,))[:4] != sig:
                    bad(f"{where}", f"the same op, algorithm, size_bytes and root as on rank {colls[key][4]}",
                        f"{o.op}/{o.algorithm}/{o.size_bytes}/{o.root}")
                coll_ranks.setdefault(key, set()).add(rank)
            elif o.kind in ("send", "recv"):
                if not _is_int(o.peer) or not 0 <= o.peer < t.nranks or o.peer == rank:
                    bad(f"{where}.peer", f"another rank in 0..{t.nranks - 1}", o.peer)
                key = (rank, o.peer, o.id) if o.kind == "send" else (o.peer, rank, o.id)
                pair = p2p.setdefault(key, [None, None])
                pair[o.kind == "recv"] = o.size_bytes
        for i, o in enumerate(ops):
            for d in o.deps:
                if d not in ids:
                    bad(f"ops.{rank}[{i}].deps", f"ids of ops on rank {rank}", d)
    for (group, oid), ranks in coll_ranks.items():
        if ranks != members[group]:
            missing = sorted(members[group] - ranks)
            bad(f"ops.{missing[0]}", f"collective {oid!r} of group {group!r} on every member", "none")
    for (src, dst, oid), (sent, got) in p2p.items():
        if sent is None or got is None:
            side = f"a send on rank {src}" if sent is None else f"a recv on rank {dst}"
            bad(f"ops.{src if sent is None else dst}", f"{side} matching id {oid!r}", "none")
        if sent != got:
            bad(f"ops.{dst}", f"recv {oid!r} of {sent} bytes as sent by rank {src}", got)
    cycle = find_cycle(t)
    if cycle:
        bad("deps", "no dependency cycle (across ranks, collectives join their members)",
            " -> ".join(cycle[:6]) + (" ..." if len(cycle) > 6 else ""))


def dependency_graph(t: Trace):
    """Nodes merged across ranks, and edges dep -> op, as plain dicts of lists."""
    preds: dict = {}
    for rank, ops in t.ops.items():
        keys = {o.id: t.node_key(rank, o) for o in ops}
        for o in ops:
            lst = preds.setdefault(keys[o.id], [])
            lst.extend(keys[d] for d in o.deps if d in keys)
    return preds


def topological_order(preds: dict) -> list:
    """Kahn's algorithm; returns fewer nodes than given when there is a cycle."""
    indeg = {k: len(v) for k, v in preds.items()}
    succs: dict = {}
    for k, v in preds.items():
        for p in v:
            succs.setdefault(p, []).append(k)
    ready = [k for k, d in indeg.items() if d == 0]
    order = []
    while ready:
        k = ready.pop()
        order.append(k)
        for s in succs.get(k, ()):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def find_cycle(t: Trace) -> list[str] | None:
    preds = dependency_graph(t)
    order = topological_order(preds)
    if len(order) == len(preds):
        return None
    left = set(preds) - set(order)
    # Walk predecessors inside the leftover set until a node repeats: that loop is a cycle.
    node, seen = next(iter(left)), []
    while node not in seen:
        seen.append(node)
        node = next(p for p in preds[node] if p in left)
    loop = seen[seen.index(node):][::-1]
    return [_describe(k) for k in loop]


def _describe(key) -> str:
    if key[0] == "coll":
        return f"{key[2]}@{key[1]}"
    if key[0] == "p2p":
        return f"{key[3]}({key[1]}->{key[2]})"
    return f"{key[2]}@rank{key[1]}"


# ---- the file ---------------------------------------------------------------------------------

def op_to_dict(o: Op) -> dict:
    """Only the fields that differ from their default, so files stay small."""
    d = {"id": o.id, "kind": o.kind}
    for name in _FIELDS[2:]:
        v = getattr(o, name)
        if v != _DEFAULTS[name]:
            d[name] = list(v) if name == "deps" else v
    return d


def op_from_dict(d, where="op", file=None) -> Op:
    if not isinstance(d, dict):
        raise InputError(where, "an object", type(d).__name__, file=file)
    unknown = set(d) - set(_FIELDS)
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "a known op field (" + ", ".join(_FIELDS) + ")",
                         "an unknown key", file=file)
    for key in ("id", "kind"):
        if key not in d:
            raise InputError(f"{where}.{key}", "a value", "nothing", file=file)
    deps = d.get("deps", ())
    if not isinstance(deps, (list, tuple)) or not all(isinstance(x, str) for x in deps):
        raise InputError(f"{where}.deps", "a list of op ids", deps, file=file)
    kw = dict(d)
    kw["deps"] = tuple(deps)
    return Op(**kw)


def to_dict(t: Trace) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "nranks": t.nranks,
        "groups": {k: list(v) for k, v in t.groups.items()},
        "meta": t.meta,
        "ops": {str(r): [op_to_dict(o) for o in ops] for r, ops in sorted(t.ops.items())},
    }


def from_dict(d, file=None) -> Trace:
    if not isinstance(d, dict):
        raise InputError("trace", "a JSON object", type(d).__name__, file=file)
    if d.get("format") != FORMAT:
        raise InputError("format", repr(FORMAT), repr(d.get("format")), file=file)
    if d.get("version") != VERSION:
        raise InputError("version", f"{VERSION} (this dtnet reads version {VERSION})", d.get("version"), file=file)
    unknown = set(d) - {"format", "version", "nranks", "groups", "meta", "ops"}
    if unknown:
        raise InputError(sorted(unknown)[0], "one of format, version, nranks, groups, meta, ops",
                         "an unknown key", file=file)
    groups, ops_in, meta = d.get("groups", {}), d.get("ops"), d.get("meta", {})
    if not isinstance(groups, dict):
        raise InputError("groups", "an object of name -> ranks", type(groups).__name__, file=file)
    if not isinstance(ops_in, dict):
        raise InputError("ops", "an object of rank -> op list", type(ops_in).__name__, file=file)
    if not isinstance(meta, dict):
        raise InputError("meta", "an object", type(meta).__name__, file=file)
    ops = {}
    for key, lst in ops_in.items():
        if not key.isdigit():
            raise InputError("ops", "rank numbers as keys", repr(key), file=file)
        if not isinstance(lst, list):
            raise InputError(f"ops.{key}", "a list of ops", type(lst).__name__, file=file)
        ops[int(key)] = [op_from_dict(o, f"ops.{key}[{i}]", file) for i, o in enumerate(lst)]
    try:
        return Trace(nranks=d.get("nranks"), groups=groups, ops=ops, meta=meta)
    except TypeError as e:
        raise InputError("trace", "valid fields", str(e), file=file) from None


def dump(trace: Trace, path) -> None:
    with open(path, "w") as f:
        json.dump(to_dict(trace), f, separators=(",", ":"))
        f.write("\n")


def load(path) -> Trace:
    """Reads and validates a trace file; every problem is an InputError naming the file."""
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise InputError("trace", "a readable file", e.strerror, file=str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError("trace", "JSON", f"invalid JSON ({e})", file=str(path)) from None
    t = from_dict(d, file=str(path))
    t.validate(file=str(path))
    return t
