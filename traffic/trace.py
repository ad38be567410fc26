"""Op traces: the workload each GPU replays, held compactly, and their versioned JSON file.

A trace is a list of rank classes. The ranks of one class run one shared op stream; its ops name
their communicator by group family ("tp": the tp group that holds this rank) and their pipeline
peer by rule ("pp+1"), resolved per rank through the trace's `Layout`. A 16,384-GPU GPT-3 job is
then 8 streams, one per pipeline stage. Any per-rank trace is still exact: one class per rank,
with concrete group names and peers. `ops_of(rank)` expands one rank when an engine asks for it.
See docs/trace-format.md for the file and the API.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from badinput import InputError
from traffic.files import read_json
from traffic.layout import DIMS, FAMILIES, Layout, decode_runs, encode_runs, parse_peer, peer_rule
from traffic.limits import KINDS, MAX_DISTINCT_OPS, MAX_EXPANDED_OPS, MAX_ITERATIONS, MAX_RANKS, MAX_SIZE_BYTES, \
    is_finite_number, is_int

FORMAT = "dtnet-trace"
VERSION = 2
READS = (1, 2)


@dataclass(slots=True)
class Op:
    """One entry of a stream. Classes and ranks share Op objects: treat them as read-only."""

    id: str                      # unique within a stream; shared by every rank in one collective or send/recv pair
    kind: str                    # compute | collective | send | recv
    deps: tuple[str, ...] = ()   # ids of ops in the same stream that must finish first
    duration_s: float = 0.0      # compute only, real-cluster seconds
    op: str | None = None        # collective op name
    algorithm: str | None = None
    group: str | None = None     # a group name, or in a class stream a layout family ("tp")
    size_bytes: int = 0
    peer: int | str | None = None  # global rank, or in a class stream a rule ("pp+1"); send/recv only
    iteration: int | None = None
    label: str = ""
    root: int | None = None      # group-local root rank, broadcast/reduce only


_FIELDS = tuple(f.name for f in fields(Op))


class RankClass:
    """Ranks that run one op stream. `ranks` is an ascending int64 array; `select` the layout rule
    that gave them ({"pp": [3]}: every rank of stage 3), written to the file instead of the list;
    `key` the error-key prefix of a per-rank trace ("ops.5")."""

    __slots__ = ("ranks", "ops", "name", "select", "key")

    def __init__(self, ranks, ops: list, name: str = "", select: dict | None = None, key: str | None = None):
        self.ranks = np.sort(np.asarray(ranks, dtype=np.int64).reshape(-1))
        self.ops = ops
        self.name = name
        self.select = select
        self.key = key

    def __len__(self):
        return int(self.ranks.size)

    def label(self) -> str:
        if self.name:
            return self.name
        return f"rank {int(self.ranks[0])}" if self.ranks.size == 1 else f"{self.ranks.size} ranks"

    def __repr__(self):
        return f"RankClass({self.label()!r}, {len(self.ops)} ops)"


class Trace:
    """nranks GPUs, their communicator groups (explicit ones plus the layout's, by rule), and the
    rank classes with their op streams.

    `Trace(nranks, groups, ops, meta)` builds a per-rank trace (one class per rank), as the
    importers do; `Trace(nranks, groups, meta=..., classes=[...], layout=...)` a compact one.
    `groups` and `ops` read both kinds as mappings (name -> ranks, rank -> ops), built on access.
    """

    def __init__(self, nranks, groups=None, ops=None, meta=None, *, classes=None, layout: Layout | None = None):
        self.nranks = nranks
        self.explicit = groups if groups is not None else {}
        self.meta = meta if meta is not None else {}
        self.layout = layout
        self.classes: list[RankClass] = list(classes or [])
        for r, lst in (ops or {}).items():
            self.classes.append(RankClass([r] if is_int(r) else [-1], lst, key=f"ops.{r}"))
        self._index = None
        self._checked = None  # (fingerprint, class graph, order) of the last validate(): see traffic.validate

    # ---- the compact API (docs/trace-format.md, "Reading a trace") ------------------------------
    @property
    def groups(self) -> "GroupsView":
        return GroupsView(self)

    @property
    def ops(self) -> "OpsView":
        return OpsView(self)

    def class_of(self, rank: int) -> int | None:
        """Index into `classes` of the class that holds `rank`, or None."""
        idx = self._rank_index()
        if isinstance(idx, dict):
            return idx.get(rank)
        if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or not 0 <= rank < idx.size \
                or idx[rank] < 0:
            return None
        return int(idx[rank])

    def class_array(self) -> np.ndarray:
        """class index of every rank 0..nranks-1 (-1: no ops). Ranks out of range are left out."""
        out = np.full(self.nranks, -1, dtype=np.int64)
        for c, cls in enumerate(self.classes):
            r = cls.ranks
            out[r[(r >= 0) & (r < self.nranks)]] = c
        return out

    def members(self, group: str) -> list[int]:
        """The ranks of a group, explicit or by rule, in group-local order."""
        return self.groups[group]

    def group_of(self, rank: int, ref: str) -> str:
        """The concrete group an op's `group` names on `rank`: a family ("tp") resolves through the
        layout, any other name is itself."""
        if self.layout is not None and ref in self.layout.families:
            return self.layout.group_name(ref, int(self.layout.group_index(ref, rank)))
        return ref

    def peer_of(self, rank: int, peer) -> int:
        """The global rank an op's `peer` names on `rank`."""
        rule = parse_peer(peer)
        if rule is None:
            return peer
        return int(self.layout.shift(rank, *rule))

    def ops_of(self, rank: int) -> list[Op]:
        """Rank `rank`'s ops with concrete groups and peers (shared Op objects where nothing changes)."""
        c = self.class_of(rank)
        if c is None:
            raise KeyError(rank)
        return list(_RankOps(self, self.classes[c], rank))

    def is_symbolic(self, o: Op) -> bool:
        return isinstance(o.peer, str) or (self.layout is not None and o.group in self.layout.families)

    def op_count(self) -> int:
        """Ops of all ranks (what a per-rank trace would hold)."""
        return sum(len(c.ops) * len(c) for c in self.classes)

    def distinct_ops(self) -> int:
        """Op objects held: the streams' lengths, shared ops counted once."""
        return len({id(o) for c in self.classes for o in c.ops})

    def validate(self, file=None) -> None:
        """Raises InputError for anything an agent could not replay: see docs/trace-format.md."""
        from traffic.validate import validate
        validate(self, file)

    def expanded(self) -> Trace:
        """The same trace with one class per rank, concrete groups and peers (expand)."""
        return expand(self)

    def node_key(self, rank: int, o: Op):
        """The identity of a rank's op across ranks: one node per collective instance or send/recv pair."""
        if o.kind == "collective":
            return ("coll", self.group_of(rank, o.group), o.id)
        if o.kind == "send":
            return ("p2p", rank, self.peer_of(rank, o.peer), o.id)
        if o.kind == "recv":
            return ("p2p", self.peer_of(rank, o.peer), rank, o.id)
        return ("compute", rank, o.id)

    def touched(self) -> None:
        """Call after changing `classes` or their ranks in place: forgets the rank -> class index."""
        self._index = None
        self._checked = None

    def _rank_index(self):
        if self._index is None:
            n = self.nranks
            if is_int(n) and 1 <= n <= MAX_RANKS and all(
                    c.ranks.size == 0 or (c.ranks[0] >= 0 and c.ranks[-1] < n) for c in self.classes):
                self._index = self.class_array()
            else:  # ranks out of range (a trace that fails validation): still readable
                self._index = {int(r): c for c, cls in enumerate(self.classes) for r in cls.ranks.tolist()}
        return self._index

    def __eq__(self, other):
        """Same ranks, groups, meta and per-rank ops, however each is held (expands: for tests)."""
        if not isinstance(other, Trace):
            return NotImplemented
        if (self.nranks, self.meta) != (other.nranks, other.meta) or dict(self.groups) != dict(other.groups):
            return False
        mine, theirs = self.ops, other.ops
        if sorted(mine) != sorted(theirs):
            return False
        return all(list(mine[r]) == list(theirs[r]) for r in mine)

    __hash__ = None

    def __repr__(self):
        return f"Trace({self.nranks} ranks, {len(self.classes)} classes, layout={self.layout})"


# ---- per-rank views --------------------------------------------------------------------------

class _RankOps(Sequence):
    """One rank's ops, made concrete as they are read: its length costs nothing, a pass over it
    holds one op at a time, and indexing makes the whole list once (the same objects after)."""

    __slots__ = ("_t", "_cls", "_rank", "_cache", "_list")

    def __init__(self, t: Trace, cls: RankClass, rank: int):
        self._t, self._cls, self._rank, self._cache, self._list = t, cls, rank, {}, None

    def __len__(self):
        return len(self._cls.ops)

    def __getitem__(self, i):
        if self._list is None:
            self._list = [self._concrete(o) for o in self._cls.ops]
        return self._list[i]

    def __iter__(self):
        if self._list is not None:
            return iter(self._list)
        return (self._concrete(o) for o in self._cls.ops)

    def _concrete(self, o: Op) -> Op:
        t = self._t
        sym_peer = isinstance(o.peer, str)
        sym_group = t.layout is not None and o.group in t.layout.families
        if not (sym_peer or sym_group):
            return o
        group, peer = o.group, o.peer
        if sym_group:
            group = self._cache.get(group) or self._cache.setdefault(group, t.group_of(self._rank, group))
        if sym_peer:
            peer = self._cache.get(peer) or self._cache.setdefault(peer, t.peer_of(self._rank, peer))
        return Op(o.id, o.kind, o.deps, o.duration_s, o.op, o.algorithm, group, o.size_bytes, peer, o.iteration,
                  o.label, o.root)

    def __eq__(self, other):
        if isinstance(other, (list, tuple, _RankOps)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self):
        return f"<ops of rank {self._rank}: {len(self)}>"


class OpsView(MutableMapping):
    """rank -> that rank's ops. A class of one rank with nothing to resolve hands out its own list
    (edits go through); other ranks get a concrete, read-only sequence."""

    def __init__(self, t: Trace):
        self._t = t

    def __getitem__(self, rank):
        t = self._t
        c = t.class_of(rank)
        if c is None:
            raise KeyError(rank)
        cls = t.classes[c]
        if cls.ranks.size == 1 and not any(t.is_symbolic(o) for o in cls.ops):
            return cls.ops
        return _RankOps(t, cls, rank)

    def __setitem__(self, rank, ops):
        self.__delitem__(rank, missing_ok=True)
        self._t.classes.append(RankClass([rank] if is_int(rank) else [-1], ops, key=f"ops.{rank}"))
        self._t.touched()

    def __delitem__(self, rank, missing_ok=False):
        t = self._t
        c = t.class_of(rank)
        if c is None:
            if missing_ok:
                return
            raise KeyError(rank)
        cls = t.classes[c]
        rest = cls.ranks[cls.ranks != rank]
        if rest.size:
            t.classes[c] = RankClass(rest, cls.ops, cls.name, None, cls.key)
        else:
            del t.classes[c]
        t.touched()

    def __iter__(self):
        ranks = [c.ranks for c in self._t.classes]
        return iter(np.sort(np.concatenate(ranks)).tolist() if ranks else [])

    def __len__(self):
        return sum(len(c) for c in self._t.classes)

    def __contains__(self, rank):
        return self._t.class_of(rank) is not None


class GroupsView(MutableMapping):
    """group name -> ranks: the explicit groups, then every group of the layout's families."""

    def __init__(self, t: Trace):
        self._t = t

    def __getitem__(self, name):
        t = self._t
        if name in t.explicit:
            return t.explicit[name]
        parsed = t.layout.parse_group(name) if t.layout is not None else None
        if parsed is None:
            raise KeyError(name)
        return t.layout.group_members(*parsed)

    def __setitem__(self, name, ranks):
        self._t.explicit[name] = ranks

    def __delitem__(self, name):
        del self._t.explicit[name]

    def __iter__(self):
        yield from self._t.explicit
        if self._t.layout is not None:
            for f in self._t.layout.families:
                for i in range(self._t.layout.group_count(f)):
                    yield self._t.layout.group_name(f, i)

    def __len__(self):
        t = self._t
        return len(t.explicit) + (t.layout.group_total() if t.layout is not None else 0)

    def __contains__(self, name):
        try:
            self[name]
        except (KeyError, TypeError):
            return False
        return True

    def items(self):
        t = self._t
        yield from t.explicit.items()
        if t.layout is not None:
            yield from t.layout.groups()


# ---- compact and expand ------------------------------------------------------------------------

def expand(t: Trace) -> Trace:
    """The same trace with one class per rank, concrete groups and peers, every group listed."""
    ops = {r: t.ops_of(r) for r in t.ops}
    return Trace(t.nranks, dict(t.groups.items()), ops, dict(t.meta))


def layout_from_meta(t: Trace) -> Layout | None:
    """The parallel layout the trace's meta states (tp, dp, pp, ep, rank_order), if it fits nranks."""
    m = t.meta
    try:
        tp, dp, pp, ep = (m.get(k, 1) for k in ("tp", "dp", "pp", "ep"))
        order = tuple(str(m.get("rank_order", "tp-dp-pp")).split("-"))
        if not all(is_int(x) and x >= 1 for x in (tp, dp, pp, ep)) or sorted(order) != sorted(DIMS) \
                or tp * dp * pp != t.nranks or dp % ep:
            return None
    except (AttributeError, TypeError):
        return None
    return Layout(tp, dp, pp, ep, order)


def compact(t: Trace, layout: Layout | None = None) -> Trace:
    """The same trace with ranks that run the same stream in one class. Groups and peers become
    rules where the layout (given, the trace's, or the one its meta states) reproduces them exactly:
    a family is used only when every one of its groups is in the trace under its rule name."""
    layout = layout or t.layout or layout_from_meta(t)
    groups = dict(t.groups.items())
    if layout is not None:
        fams = []
        for f in FAMILIES:
            lay = Layout(layout.tp, layout.dp, layout.pp, layout.ep, layout.order, (f,))
            if all(groups.get(name) == members for name, members in lay.groups()):
                fams.append(f)
        layout = Layout(layout.tp, layout.dp, layout.pp, layout.ep, layout.order, tuple(fams))
        for name, _ in layout.groups():
            groups.pop(name, None)
    by_stream: dict = {}
    for r in t.ops:
        stream = [_symbolic(o, r, layout) for o in t.ops_of(r)]
        key = tuple(tuple(getattr(o, f) for f in _FIELDS) for o in stream)
        entry = by_stream.setdefault(key, (stream, []))
        entry[1].append(r)
    classes = [RankClass(ranks, stream) for stream, ranks in by_stream.values()]
    return Trace(t.nranks, groups, meta=dict(t.meta), classes=classes, layout=layout)


def _symbolic(o: Op, rank: int, layout: Layout | None) -> Op:
    if layout is None:
        return o
    group, peer = o.group, o.peer
    parsed = layout.parse_group(group) if o.kind == "collective" else None
    if parsed is not None and int(layout.group_index(parsed[0], rank)) == parsed[1]:
        group = parsed[0]
    if o.kind in ("send", "recv") and is_int(peer) and 0 <= peer < layout.nranks and peer != rank:
        rule = peer_rule(layout, rank, peer)
        if rule is not None and int(layout.shift(rank, *parse_peer(rule))) == peer:
            peer = rule
    if (group, peer) == (o.group, o.peer):
        return o
    return Op(o.id, o.kind, o.deps, o.duration_s, o.op, o.algorithm, group, o.size_bytes, peer, o.iteration,
              o.label, o.root)


def first_iterations(t: Trace, n: int) -> Trace | None:
    """The same trace cut to its first n iterations (by iteration number), for a shorter run of the
    same traffic pattern; None when that cannot be cut cleanly: an op without an iteration, or one
    that depends on a later iteration's op."""
    if any(o.iteration is None for c in t.classes for o in c.ops):
        return None
    keep = set(sorted({o.iteration for c in t.classes for o in c.ops})[:n])
    classes = []
    for c in t.classes:
        lst = [o for o in c.ops if o.iteration in keep]
        ids = {o.id for o in lst}
        if any(d not in ids for o in lst for d in o.deps):
            return None
        classes.append(RankClass(c.ranks, lst, c.name, c.select, c.key))
    cut = Trace(t.nranks, dict(t.explicit), meta={**t.meta, "iterations_kept": len(keep)}, classes=classes,
                layout=t.layout)
    try:
        cut.validate()
    except InputError:
        return None
    return cut


def find_cycle(t: Trace) -> list[str] | None:
    """A dependency cycle across ranks (described node by node), or None."""
    from traffic.validate import find_cycle as _find
    return _find(t)


# ---- the file ---------------------------------------------------------------------------------

def op_to_dict(o: Op) -> dict:
    """Only the fields that differ from their default, so files stay small (this runs once per
    distinct op of every file written, so no loop over every field)."""
    d = {"id": o.id, "kind": o.kind}
    if o.deps != ():
        d["deps"] = list(o.deps)
    if o.duration_s != 0.0:
        d["duration_s"] = o.duration_s
    for name in _NONE_DEFAULT[:3]:
        v = getattr(o, name)
        if v is not None:
            d[name] = v
    if o.size_bytes != 0:
        d["size_bytes"] = o.size_bytes
    for name in _NONE_DEFAULT[3:5]:
        v = getattr(o, name)
        if v is not None:
            d[name] = v
    if o.label != "":
        d["label"] = o.label
    if o.root is not None:
        d["root"] = o.root
    return d


_NONE_DEFAULT = ("op", "algorithm", "group", "peer", "iteration")  # in field order, around size_bytes
_FIELD_SET = frozenset(_FIELDS)


def op_from_dict(d, where="op", file=None) -> Op:
    if not isinstance(d, dict):
        raise InputError(where, "an object", type(d).__name__, file=file)
    if not d.keys() <= _FIELD_SET:
        raise InputError(f"{where}.{sorted(set(d) - _FIELD_SET)[0]}", "a known op field (" + ", ".join(_FIELDS) + ")",
                         "an unknown key", file=file)
    for key in ("id", "kind"):
        if key not in d:
            raise InputError(f"{where}.{key}", "a value", "nothing", file=file)
    if "deps" in d:
        deps = d["deps"]
        if not isinstance(deps, (list, tuple)) or not all(isinstance(x, str) for x in deps):
            raise InputError(f"{where}.deps", "a list of op ids", deps, file=file)
        d = {**d, "deps": tuple(deps)}
    return Op(**d)


def _entries_out(ops, uses, index, table) -> list:
    """A stream as written: ops used once inline, shared ones as op_table indices and runs."""
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
        elif isinstance(last, int) and not isinstance(last, bool) and last + 1 == i:
            entries[-1] = [last, i + 1]
        else:
            entries.append(i)
    return entries


def to_dict(t: Trace) -> dict:
    """The file's JSON object (version 2). An op object used more than once, by several classes or
    twice in one, is written once in `op_table`; streams refer to it by index, or to a run of the
    table as [start, stop]."""
    uses: dict[int, int] = {}
    for c in t.classes:
        for o in c.ops:
            uses[id(o)] = uses.get(id(o), 0) + 1
    table: list[dict] = []
    index: dict[int, int] = {}
    classes = []
    for c in t.classes:
        cd: dict = {}
        if c.name:
            cd["name"] = c.name
        cd["ranks"] = _select_out(c.select) if c.select is not None else encode_runs(c.ranks)
        cd["ops"] = _entries_out(c.ops, uses, index, table)
        classes.append(cd)
    d = {"format": FORMAT, "version": VERSION, "nranks": t.nranks}
    if t.layout is not None:
        d["layout"] = t.layout.to_dict()
    d["groups"] = {k: encode_runs(v) for k, v in t.explicit.items()}
    d["meta"] = t.meta
    if table:
        d["op_table"] = table
    d["classes"] = classes
    return d


def _select_out(sel: dict) -> dict:
    return {dim: (v[0] if len(v) == 1 else encode_runs(v)) for dim, v in sel.items()}


def from_dict(d, file=None) -> Trace:
    if not isinstance(d, dict):
        raise InputError("trace", "a JSON object", type(d).__name__, file=file)
    if d.get("format") != FORMAT:
        raise InputError("format", repr(FORMAT), repr(d.get("format")), file=file)
    if type(d.get("version")) is not int or d["version"] not in READS:  # true == 1 in Python: not a version
        raise InputError("version", "1 or 2 (this dtnet reads versions 1 and 2)", d.get("version"), file=file)
    if d["version"] == 1:
        return _from_v1(d, file)
    return _from_v2(d, file)


def _common(d, file, keys):
    unknown = set(d) - set(keys)
    if unknown:
        raise InputError(sorted(unknown)[0], "one of " + ", ".join(keys), "an unknown key", file=file)
    groups, meta, table_in = d.get("groups", {}), d.get("meta", {}), d.get("op_table", [])
    if not isinstance(groups, dict):
        raise InputError("groups", "an object of name -> ranks", type(groups).__name__, file=file)
    if not isinstance(meta, dict):
        raise InputError("meta", "an object", type(meta).__name__, file=file)
    if not isinstance(table_in, list):
        raise InputError("op_table", "a list of ops", type(table_in).__name__, file=file)
    table = [op_from_dict(o, f"op_table[{i}]", file) for i, o in enumerate(table_in)]
    return groups, meta, table


def _from_v1(d, file) -> Trace:
    groups, meta, table = _common(d, file, ("format", "version", "nranks", "groups", "meta", "op_table", "ops"))
    ops_in = d.get("ops")
    if not isinstance(ops_in, dict):
        raise InputError("ops", "an object of rank -> op list", type(ops_in).__name__, file=file)
    ops = {}
    for key, lst in ops_in.items():
        if not (key.isascii() and key.isdigit() and str(int(key)) == key):
            raise InputError("ops", "rank numbers as keys (0, 1, ...)", repr(key), file=file)
        if not isinstance(lst, list):
            raise InputError(f"ops.{key}", "a list of ops", type(lst).__name__, file=file)
        ops[int(key)] = _entries(lst, table, f"ops.{key}", file)
    return Trace(nranks=d.get("nranks"), groups=groups, ops=ops, meta=meta)


V2_KEYS = ("format", "version", "nranks", "layout", "groups", "meta", "op_table", "classes")


def _from_v2(d, file) -> Trace:
    if "ops" in d and "classes" not in d:  # the per-rank body of version 1
        raise InputError("version", "1 for a file of per-rank ops (version 2 files hold classes)", 2, file=file)
    groups_in, meta, table = _common(d, file, V2_KEYS)
    nranks = d.get("nranks")
    if not is_int(nranks) or not 1 <= nranks <= MAX_RANKS:
        raise InputError("nranks", f"an integer in 1..{MAX_RANKS}", nranks, file=file)
    layout = _layout_in(d["layout"], nranks, file) if "layout" in d else None
    groups = {}
    for name, value in groups_in.items():
        ranks = decode_runs(value, nranks)
        if isinstance(ranks, str):
            raise InputError(f"groups.{name}", ranks, json.dumps(value)[:40], file=file)
        groups[name] = ranks.tolist()
    classes_in = d.get("classes")
    if not isinstance(classes_in, list):
        raise InputError("classes", "a list of rank classes", type(classes_in).__name__, file=file)
    classes = []
    for i, c in enumerate(classes_in):
        where = f"classes[{i}]"
        if not isinstance(c, dict):
            raise InputError(where, "an object with ranks and ops", type(c).__name__, file=file)
        extra = set(c) - {"name", "ranks", "ops"}
        if extra:
            raise InputError(f"{where}.{sorted(extra)[0]}", "one of name, ranks, ops", "an unknown key", file=file)
        name = c.get("name", "")
        if not isinstance(name, str):
            raise InputError(f"{where}.name", "a string", name, file=file)
        ranks, select = _ranks_in(c.get("ranks"), layout, nranks, f"{where}.ranks", file)
        lst = c.get("ops")
        if not isinstance(lst, list):
            raise InputError(f"{where}.ops", "a list of ops", type(lst).__name__, file=file)
        classes.append(RankClass(ranks, _entries(lst, table, f"{where}.ops", file), name, select))
    return Trace(nranks, groups, meta=meta, classes=classes, layout=layout)


def _layout_in(v, nranks, file) -> Layout:
    if not isinstance(v, dict):
        raise InputError("layout", "an object (tp, dp, pp, ep, order, groups)", type(v).__name__, file=file)
    extra = set(v) - {"tp", "dp", "pp", "ep", "order", "groups"}
    if extra:
        raise InputError(f"layout.{sorted(extra)[0]}", "one of tp, dp, pp, ep, order, groups", "an unknown key",
                         file=file)
    sizes = {}
    for k in ("tp", "dp", "pp", "ep"):
        x = v.get(k, 1)
        if not is_int(x) or not 1 <= x <= MAX_RANKS:
            raise InputError(f"layout.{k}", f"an integer in 1..{MAX_RANKS}", x, file=file)
        sizes[k] = x
    if sizes["tp"] * sizes["dp"] * sizes["pp"] != nranks:
        raise InputError("layout", f"tp x dp x pp = nranks = {nranks}",
                         f"{sizes['tp']} x {sizes['dp']} x {sizes['pp']}", file=file)
    if sizes["dp"] % sizes["ep"]:
        raise InputError("layout.ep", f"a divisor of dp = {sizes['dp']}", sizes["ep"], file=file)
    order = v.get("order", "tp-dp-pp")
    if not isinstance(order, str) or sorted(order.split("-")) != sorted(DIMS):
        raise InputError("layout.order", "tp, dp and pp joined by '-', fastest first (tp-dp-pp)", order, file=file)
    fams = v.get("groups", [])
    if not isinstance(fams, list) or any(f not in FAMILIES for f in fams) or len(set(fams)) != len(fams):
        raise InputError("layout.groups", "distinct group families among " + ", ".join(FAMILIES), fams, file=file)
    return Layout(sizes["tp"], sizes["dp"], sizes["pp"], sizes["ep"], tuple(order.split("-")), tuple(fams))


def _ranks_in(v, layout, nranks, where, file):
    """(ranks, select): a list of ranks and runs, or {dim: coordinate(s)} by the layout's rule."""
    if isinstance(v, dict):
        if layout is None:
            raise InputError(where, "a list of ranks (a rule like {\"pp\": 3} needs a layout)", "a rule", file=file)
        select = {}
        for dim, coords in v.items():
            if dim not in DIMS:
                raise InputError(f"{where}.{dim}", "tp, dp or pp", "an unknown key", file=file)
            n = layout.size(dim)
            vals = decode_runs([coords] if is_int(coords) else coords, n)
            if isinstance(vals, str) or vals.size == 0 or vals.min() < 0 or vals.max() >= n:
                raise InputError(f"{where}.{dim}", f"coordinates in 0..{n - 1} (an integer or a list and runs)",
                                 json.dumps(coords)[:40], file=file)
            select[dim] = sorted(set(vals.tolist()))
        return layout.select(select), select
    ranks = decode_runs(v, nranks)
    if isinstance(ranks, str):
        raise InputError(where, ranks + " or a layout rule", json.dumps(v)[:40], file=file)
    return np.sort(ranks), None


def _entries(lst, table, where, file):
    out: list[Op] = []
    for i, e in enumerate(lst):
        if isinstance(e, dict):
            out.append(op_from_dict(e, f"{where}[{i}]", file))
        elif is_int(e) and 0 <= e < len(table):
            out.append(table[e])
        elif isinstance(e, list) and len(e) == 2 and all(is_int(x) for x in e) and 0 <= e[0] < e[1] <= len(table):
            out.extend(table[e[0]:e[1]])
        else:
            raise InputError(f"{where}[{i}]", f"an op, an op_table index or a [start, stop] run of the "
                             f"{len(table)}-entry op_table", json.dumps(e)[:40], file=file)
    return out


def dump(trace: Trace, path) -> None:
    """Writes the whole file or nothing: on any failure, what was at `path` stays as it was."""
    with no_gc():
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
def no_gc():
    """Millions of small acyclic objects: the cyclic collector would rescan them over and over."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path) -> Trace:
    """Reads and validates a trace file (version 1 or 2); every problem is an InputError naming the file."""
    with no_gc():
        d = read_json(path, "trace")
        t = from_dict(d, file=str(path))
        del d
        t.validate(file=str(path))
    return t
