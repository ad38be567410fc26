"""Per-rank op traces: the workload each emulated GPU replays, and their versioned JSON file."""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
from dataclasses import dataclass, field, fields

from badinput import InputError
from traffic.collectives import ALGORITHMS, OPS
from traffic.files import read_json

FORMAT = "dtnet-trace"
VERSION = 1
KINDS = ("compute", "collective", "send", "recv")
MAX_SIZE_BYTES = (1 << 63) - 1  # int64, as Chakra and SimAI store sizes; larger ones overflow float math


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


def is_finite_number(x) -> bool:
    """An int or float, not a bool, that is finite and fits float arithmetic (ints within 64 bits)."""
    if isinstance(x, float):
        return math.isfinite(x)
    return _is_int(x) and abs(x) <= MAX_SIZE_BYTES


def _validate(t: Trace, file):
    def bad(key, expected, found):
        raise InputError(key, expected, found, file=file)

    if not _is_int(t.nranks) or t.nranks < 1:
        bad("nranks", "an integer >= 1", t.nranks)
    gps = t.meta.get("gpus_per_server")
    if gps is not None and (not _is_int(gps) or gps < 1):
        bad("meta.gpus_per_server", "an integer >= 1 or null", gps)
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
            if not _is_int(o.size_bytes) or not 0 <= o.size_bytes <= MAX_SIZE_BYTES:
                bad(f"{where}.size_bytes", f"an integer in 0..{MAX_SIZE_BYTES}", o.size_bytes)
            if not is_finite_number(o.duration_s) or o.duration_s < 0:
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
                if not isinstance(o.group, str) or o.group not in members:
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


def first_iterations(t: Trace, n: int) -> Trace | None:
    """The same trace cut to its first n iterations (by iteration number), for a shorter run of the
    same traffic pattern; None when that cannot be cut cleanly: an op without an iteration, or one
    that depends on a later iteration's op."""
    if any(o.iteration is None for ops in t.ops.values() for o in ops):
        return None
    keep = set(sorted({o.iteration for ops in t.ops.values() for o in ops})[:n])
    ops = {r: [o for o in lst if o.iteration in keep] for r, lst in t.ops.items()}
    for lst in ops.values():
        ids = {o.id for o in lst}
        if any(d not in ids for o in lst for d in o.deps):
            return None
    cut = Trace(nranks=t.nranks, groups=dict(t.groups), ops=ops, meta={**t.meta, "iterations_kept": len(keep)})
    try:
        cut.validate()
    except InputError:
        return None
    return cut


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
    """The file's JSON object. An op object used by several ranks is written once, in `op_table`,
    and ranks refer to it by index, or to a run of the table as [start, stop]."""
    uses: dict[int, int] = {}
    for ops in t.ops.values():
        for o in ops:
            uses[id(o)] = uses.get(id(o), 0) + 1
    table: list[dict] = []
    index: dict[int, int] = {}
    out_ops = {}
    for r, ops in sorted(t.ops.items()):
        entries: list = []
        for o in ops:
            if uses[id(o)] < 2:
                entries.append(op_to_dict(o))
                continue
            i = index.get(id(o))
            if i is None:
                i = index[id(o)] = len(table)
                table.append(op_to_dict(o))
            last = entries[-1] if entries else None
            if isinstance(last, list) and last[1] == i:
                last[1] = i + 1
            elif isinstance(last, int) and last + 1 == i:
                entries[-1] = [last, i + 1]
            else:
                entries.append(i)
        out_ops[str(r)] = entries
    d = {"format": FORMAT, "version": VERSION, "nranks": t.nranks,
         "groups": {k: list(v) for k, v in t.groups.items()}, "meta": t.meta}
    if table:
        d["op_table"] = table
    d["ops"] = out_ops
    return d


def from_dict(d, file=None) -> Trace:
    if not isinstance(d, dict):
        raise InputError("trace", "a JSON object", type(d).__name__, file=file)
    if d.get("format") != FORMAT:
        raise InputError("format", repr(FORMAT), repr(d.get("format")), file=file)
    if d.get("version") != VERSION:
        raise InputError("version", f"{VERSION} (this dtnet reads version {VERSION})", d.get("version"), file=file)
    unknown = set(d) - {"format", "version", "nranks", "groups", "meta", "op_table", "ops"}
    if unknown:
        raise InputError(sorted(unknown)[0], "one of format, version, nranks, groups, meta, op_table, ops",
                         "an unknown key", file=file)
    groups, ops_in, meta, table_in = d.get("groups", {}), d.get("ops"), d.get("meta", {}), d.get("op_table", [])
    if not isinstance(groups, dict):
        raise InputError("groups", "an object of name -> ranks", type(groups).__name__, file=file)
    if not isinstance(ops_in, dict):
        raise InputError("ops", "an object of rank -> op list", type(ops_in).__name__, file=file)
    if not isinstance(meta, dict):
        raise InputError("meta", "an object", type(meta).__name__, file=file)
    if not isinstance(table_in, list):
        raise InputError("op_table", "a list of ops", type(table_in).__name__, file=file)
    table = [op_from_dict(o, f"op_table[{i}]", file) for i, o in enumerate(table_in)]
    ops = {}
    for key, lst in ops_in.items():
        if not (key.isascii() and key.isdigit() and str(int(key)) == key):
            raise InputError("ops", "rank numbers as keys (0, 1, ...)", repr(key), file=file)
        if not isinstance(lst, list):
            raise InputError(f"ops.{key}", "a list of ops", type(lst).__name__, file=file)
        ops[int(key)] = _entries(lst, table, f"ops.{key}", file)
    try:
        return Trace(nranks=d.get("nranks"), groups=groups, ops=ops, meta=meta)
    except TypeError as e:
        raise InputError("trace", "valid fields", str(e), file=file) from None


def _entries(lst, table, where, file):
    out: list[Op] = []
    for i, e in enumerate(lst):
        if isinstance(e, dict):
            out.append(op_from_dict(e, f"{where}[{i}]", file))
        elif _is_int(e) and 0 <= e < len(table):
            out.append(table[e])
        elif isinstance(e, list) and len(e) == 2 and all(_is_int(x) for x in e) and 0 <= e[0] < e[1] <= len(table):
            out.extend(table[e[0]:e[1]])
        else:
            raise InputError(f"{where}[{i}]", f"an op, an op_table index or a [start, stop] run of the "
                             f"{len(table)}-entry op_table", json.dumps(e)[:40], file=file)
    return out


def dump(trace: Trace, path) -> None:
    """Writes the whole file or nothing: on any failure, what was at `path` stays as it was."""
    with _no_gc():
        text = json.dumps(to_dict(trace), separators=(",", ":"))  # dumps runs the C encoder; dump does not
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _no_gc():
    """Millions of small acyclic objects: the cyclic collector would rescan them over and over."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path) -> Trace:
    """Reads and validates a trace file; every problem is an InputError naming the file."""
    with _no_gc():
        d = read_json(path, "trace")
        t = from_dict(d, file=str(path))
        t.validate(file=str(path))
    return t
