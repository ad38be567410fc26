"""Every rule of docs/trace-format.md, checked on the compact form.

Per-op rules are checked once per class stream. Collectives are checked per group: the members'
classes must hold the same collectives (id -> op, algorithm, size, root); for a layout family that
is one vectorised pass over the ranks. Send/recv pairs are checked per (class, peer rule) with the
ranks as arrays. Cycles are looked for in the class-level graph (`class_graph`), onto which every
per-rank cycle maps: when it has none there is none; when it has one, and the classes hold more
than one rank, the per-rank graph decides.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from badinput import InputError
from badinput.limits import COMPUTE_S
from traffic.collectives import ALGORITHMS, OPS
from traffic.layout import FAMILIES, parse_peer
from traffic.limits import KINDS, MAX_EXPANDED_OPS, MAX_RANKS, MAX_SIZE_BYTES, is_int

# Trace (traffic.trace) stands in annotations only: traffic.trace imports this module, not the reverse.

KIND_SET = frozenset(KINDS)
MAX_DUR = COMPUTE_S.hi  # one op's compute, real seconds (badinput.limits)


def validate(t: Trace, file=None) -> None:
    _Validator(t, file).run()


class _Validator:
    def __init__(self, t: Trace, file):
        self.t, self.file = t, file

    def bad(self, key, expected, found):
        raise InputError(key, expected, found, file=self.file)

    def run(self):
        t, bad = self.t, self.bad
        n = t.nranks
        if not is_int(n) or n < 1:
            bad("nranks", "an integer >= 1", n)
        if n > MAX_RANKS:
            bad("nranks", f"at most {MAX_RANKS} ranks (the workload layer's limit)", n)
        gps = t.meta.get("gpus_per_server")
        if gps is not None and (not is_int(gps) or gps < 1):
            bad("meta.gpus_per_server", "an integer >= 1 or null", gps)
        self.check_layout()
        self.check_groups()
        self.check_classes()
        self.check_ops()
        self.check_collectives()
        self.check_p2p()
        self.check_cycles()

    # ---- structure ------------------------------------------------------------------------
    def check_layout(self):
        lay = self.t.layout
        self.families = ()
        if lay is None:
            return
        if lay.nranks != self.t.nranks:
            self.bad("layout", f"tp x dp x pp = nranks = {self.t.nranks}", f"{lay.tp} x {lay.dp} x {lay.pp}")
        if lay.dp % lay.ep:
            self.bad("layout.ep", f"a divisor of dp = {lay.dp}", lay.ep)
        if any(f not in FAMILIES for f in lay.families) or len(set(lay.families)) != len(lay.families):
            self.bad("layout.groups", "distinct group families among " + ", ".join(FAMILIES), list(lay.families))
        self.families = lay.families

    def check_groups(self):
        t, n, lay = self.t, self.t.nranks, self.t.layout
        for name, ranks in t.explicit.items():
            if not isinstance(ranks, list) or not ranks or not all(is_int(r) for r in ranks):
                self.bad(f"groups.{name}", "a non-empty list of ranks", ranks)
            out = [r for r in ranks if not 0 <= r < n]
            if out:
                self.bad(f"groups.{name}", f"ranks in 0..{n - 1}", out[0])
            if len(set(ranks)) != len(ranks):
                self.bad(f"groups.{name}", "distinct ranks", ranks)
            if lay is not None and (name in FAMILIES or lay.parse_group(name) is not None):
                self.bad(f"groups.{name}", "a name apart from the layout's families and their groups", name)
        self._member_sets: dict = {}

    def members_set(self, name):
        s = self._member_sets.get(name)
        if s is None:
            s = self._member_sets[name] = set(self.t.explicit[name])
        return s

    def check_classes(self):
        t, n = self.t, self.t.nranks
        self.per_rank = all(c.key is not None for c in t.classes)
        class_of = np.full(n, -1, dtype=np.int64)
        for c, cls in enumerate(t.classes):
            r = cls.ranks
            key = "ops" if cls.key is not None else f"classes[{c}].ranks"
            if r.size == 0:
                self.bad(key, "at least one rank", "none")
            out = r[(r < 0) | (r >= n)]
            if out.size:
                found = cls.key[4:] if cls.key is not None and r.size == 1 else int(out[0])
                self.bad(key, f"ranks in 0..{n - 1}", found)
            if r.size > 1 and np.unique(r).size != r.size or (class_of[r] >= 0).any():
                dup = int(r[class_of[r] >= 0][0]) if (class_of[r] >= 0).any() else int(r[0])
                self.bad(key, "each rank in one class", f"rank {dup} twice")
            class_of[r] = c
        self.class_of = class_of

    def base(self, c):
        cls = self.t.classes[c]
        return cls.key if cls.key is not None else f"classes[{c}].ops"

    def rank_key(self, r):
        """(key, note) naming rank r's stream in an error."""
        c = int(self.class_of[r])
        if c < 0:
            return ("ops." + str(r), "") if self.per_rank else ("classes", f" (rank {r} is in no class)")
        if self.t.classes[c].key is not None:
            return self.t.classes[c].key, ""
        return self.base(c), f" (rank {r})"

    # ---- per-op rules, once per stream ----------------------------------------------------
    def check_ops(self):
        t, bad, n = self.t, self.bad, self.t.nranks
        self.refs: list[dict] = []     # per class: group ref -> {id: (signature, op index)}
        self.ids: list[dict] = []      # per class: id -> op index
        self.p2p: list[tuple] = []     # (class, op index)
        fams = self.families
        for c, cls in enumerate(t.classes):
            base = self.base(c)
            rank0 = int(cls.ranks[0])
            one = cls.ranks.size == 1
            rank_word = f"rank {rank0}" if one else "every rank of the class"
            ids: dict = {}
            refs: dict = {}
            subset_ok: dict = {}
            for i, o in enumerate(cls.ops):
                oid, size, dur, it = o.id, o.size_bytes, o.duration_s, o.iteration
                # The common case in one expression; anything else takes the checks that name it.
                if not (type(oid) is str and oid and oid not in ids and type(o.kind) is str and o.kind in KIND_SET
                        and type(size) is int
                        and 0 <= size <= MAX_SIZE_BYTES and (type(dur) is float and 0.0 <= dur <= MAX_DUR or
                                                              type(dur) is int and 0 <= dur <= MAX_DUR)
                        and (it is None or type(it) is int and it >= 0) and type(o.label) is str):
                    self.check_fields(o, f"{base}[{i}]", ids, one)
                ids[oid] = i
                if o.kind == "collective":
                    where = f"{base}[{i}]"
                    if o.op not in OPS:
                        bad(f"{where}.op", "one of " + ", ".join(OPS), o.op)
                    if o.algorithm is not None and o.algorithm not in ALGORITHMS:
                        bad(f"{where}.algorithm", "one of " + ", ".join(ALGORITHMS), o.algorithm)
                    g = o.group
                    if isinstance(g, str) and g in fams:
                        gsize = t.layout.family_size(g)
                    elif isinstance(g, str) and g in t.explicit:
                        ok = subset_ok.get(g)
                        if ok is None:
                            ok = subset_ok[g] = self.outside(cls.ranks, g)
                        if ok is not True:
                            bad(f"{where}.group", f"a group that holds rank {ok}", g)
                        gsize = len(t.explicit[g])
                    else:
                        named = "a group named in groups" + (" or a layout family (" + ", ".join(fams) + ")"
                                                             if fams else "")
                        bad(f"{where}.group", named, g)
                    if o.root is not None and (not is_int(o.root) or not 0 <= o.root < gsize):
                        bad(f"{where}.root", f"a group-local rank in 0..{gsize - 1}", o.root)
                    refs.setdefault(g, {})[o.id] = ((o.op, o.algorithm, o.size_bytes, o.root), i)
                elif o.kind in ("send", "recv"):
                    self.check_peer(cls, o, f"{base}[{i}]", n)
                    self.p2p.append((c, i))
            for i, o in enumerate(cls.ops):
                for d in o.deps:
                    if d not in ids:
                        bad(f"{base}[{i}].deps", f"ids of ops on {rank_word}" if one else "ids of ops in the stream",
                            d)
            self.refs.append(refs)
            self.ids.append(ids)

    def check_fields(self, o, where, ids, one):
        """The rules every op follows, one by one, so that the first broken one is named."""
        bad = self.bad
        if not isinstance(o.id, str) or not o.id:
            bad(f"{where}.id", "a non-empty string", o.id)
        if o.id in ids:
            bad(f"{where}.id", "an id unique within the rank" if one else "an id unique within the stream", o.id)
        if o.kind not in KINDS:
            bad(f"{where}.kind", "one of " + ", ".join(KINDS), o.kind)
        if not is_int(o.size_bytes) or not 0 <= o.size_bytes <= MAX_SIZE_BYTES:
            bad(f"{where}.size_bytes", f"an integer in 0..{MAX_SIZE_BYTES}", o.size_bytes)
        if not COMPUTE_S.ok(o.duration_s):
            bad(f"{where}.duration_s", COMPUTE_S.expected, o.duration_s)
        if o.iteration is not None and (not is_int(o.iteration) or o.iteration < 0):
            bad(f"{where}.iteration", "an integer >= 0 or null", o.iteration)
        if not isinstance(o.label, str):
            bad(f"{where}.label", "a string", o.label)

    def outside(self, ranks, group):
        """True when the explicit group holds all these ranks, else the first rank it lacks."""
        if ranks.size == 1:
            r = int(ranks[0])
            return True if r in self.members_set(group) else r
        inside = np.isin(ranks, np.asarray(self.t.explicit[group], dtype=np.int64))
        return True if inside.all() else int(ranks[~inside][0])

    def check_peer(self, cls, o, where, n):
        p = o.peer
        if is_int(p):
            if not 0 <= p < n or (p in cls.ranks if cls.ranks.size > 1 else p == int(cls.ranks[0])):
                self.bad(f"{where}.peer", f"another rank in 0..{n - 1}", p)
            return
        rule = parse_peer(p)
        if rule is None or self.t.layout is None:
            extra = " or a rule like pp+1" if self.t.layout is not None else ""
            self.bad(f"{where}.peer", f"another rank in 0..{n - 1}{extra}", p)
        if rule[1] % self.t.layout.size(rule[0]) == 0:
            self.bad(f"{where}.peer", f"another rank: {rule[0]} has {self.t.layout.size(rule[0])} positions", p)

    # ---- collectives: every member holds the same ones ------------------------------------
    def check_collectives(self):
        t = self.t
        problems = []  # (kind 0 mismatch / 1 missing, order, raise args)
        for g in t.explicit:
            users = [c for c, refs in enumerate(self.refs) if g in refs]
            if users:
                members = np.asarray(t.explicit[g], dtype=np.int64)
                problems += self.compare(g, g, members, users)
        for f in self.families:
            users = [c for c, refs in enumerate(self.refs) if f in refs]
            if not users:
                continue
            for gi, members in self.family_conflicts(f):
                problems += self.compare(f, t.layout.group_name(f, gi), members, users)
                break  # the first conflicting group is enough to report
        if problems:
            problems.sort(key=lambda p: p[:2])
            self.bad(*problems[0][2])

    def family_conflicts(self, f):
        """(group index, members) of the family's groups whose members' classes hold different
        collectives on it, in group order."""
        lay, n = self.t.layout, self.t.nranks
        interned: dict = {}
        mapid = np.zeros(len(self.t.classes) + 1, dtype=np.int64)  # last slot: ranks in no class
        for c, refs in enumerate(self.refs):
            sig = frozenset((k, v[0]) for k, v in refs.get(f, {}).items())
            mapid[c] = interned.setdefault(sig, len(interned) + 1) if sig else 0
        per_rank = mapid[self.class_of]  # class -1 reads the last slot: 0, nothing
        ranks = np.arange(n, dtype=np.int64)
        size = lay.family_size(f)
        order = np.argsort(lay.group_index(f, ranks) * size + lay.local_rank(f, ranks), kind="stable")
        table = per_rank[order].reshape(-1, size)
        for gi in np.flatnonzero(table.min(axis=1) != table.max(axis=1)).tolist():
            yield gi, order.reshape(-1, size)[gi]

    def compare(self, ref, name, members, users):
        """Problems in one group: members' classes that disagree on a collective, or miss one."""
        classes = self.class_of[members]
        present = sorted({int(c) for c in classes}, key=lambda c: int(members[classes == c].min()))
        first_rank = {c: int(members[classes == c].min()) for c in present}
        out = []
        order: dict = {}
        for c in present:
            if c < 0:
                continue
            for oid, (sig, i) in self.refs[c].get(ref, {}).items():
                if oid not in order:
                    order[oid] = (len(order), sig, c)
                elif order[oid][1] != sig:
                    first = first_rank[order[oid][2]]
                    found = "/".join(map(str, sig))
                    out.append((0, order[oid][0], (f"{self.base(c)}[{i}]", f"the same op, algorithm, size_bytes "
                                                   f"and root as on rank {first}", found)))
        for c in present:
            have = self.refs[c].get(ref, {}) if c >= 0 else {}
            for oid, (k, _, _) in order.items():
                if oid not in have:
                    key, note = self.rank_key(first_rank[c])
                    out.append((1, k, (key, f"collective {oid!r} of group {name!r} on every member{note}", "none")))
                    break
        return out

    # ---- send/recv: every send has its recv ------------------------------------------------
    def check_p2p(self):
        t = self.t
        resolved: dict = {}  # (class, peer) -> peers of the class's ranks
        split: dict = {}     # (class, peer) -> [(class of those peers, indices into the class's ranks)]
        checked: dict = {}   # (class, peer, partner class, partner peer) -> first rank index that fails, or -1

        def peers(c, p):
            key = (c, p)
            if key not in resolved:
                ranks = t.classes[c].ranks
                rule = parse_peer(p)
                resolved[key] = np.full(ranks.size, p, dtype=np.int64) if rule is None else \
                    t.layout.shift(ranks, *rule)
            return resolved[key]

        for c, i in self.p2p:
            o = t.classes[c].ops[i]
            ranks = t.classes[c].ranks
            want = "recv" if o.kind == "send" else "send"
            if ranks.size == 1:  # a per-rank stream: plain ints
                r = int(ranks[0])
                q = t.peer_of(r, o.peer)
                d = int(self.class_of[q])
                j = self.ids[d].get(o.id) if d >= 0 else None
                partner = t.classes[d].ops[j] if j is not None else None
                ok = partner is not None and partner.kind == want and t.peer_of(q, partner.peer) == r
                self.pair_problem(o, partner if ok else None, r, q, want)
                continue
            q = peers(c, o.peer)
            if (c, o.peer) not in split:
                dcls = self.class_of[q]
                split[(c, o.peer)] = [(d, np.flatnonzero(dcls == d)) for d in np.unique(dcls).tolist()]
            for d, sel in split[(c, o.peer)]:
                j = self.ids[d].get(o.id) if d >= 0 else None
                partner = t.classes[d].ops[j] if j is not None else None
                if partner is None or partner.kind != want:
                    self.pair_problem(o, None, int(ranks[sel[0]]), int(q[sel[0]]), want)
                key = (c, o.peer, d, partner.peer)
                if key not in checked:
                    back = peers(d, partner.peer)[np.searchsorted(t.classes[d].ranks, q[sel])]
                    wrong = np.flatnonzero(back != ranks[sel])
                    checked[key] = int(sel[wrong[0]]) if wrong.size else -1
                fail = checked[key]
                if fail >= 0:
                    self.pair_problem(o, None, int(ranks[fail]), int(q[fail]), want)
                self.pair_problem(o, partner, int(ranks[sel[0]]), int(q[sel[0]]), want)

    def pair_problem(self, o, partner, r, q, want):
        """Raises for a send or recv on rank r without its partner on rank q, or of another size."""
        if partner is None:
            key, note = self.rank_key(q)
            self.bad(key, f"a {want} on rank {q} matching id {o.id!r}{note}", "none")
        if o.kind == "send" and partner.size_bytes != o.size_bytes:
            key, note = self.rank_key(q)
            self.bad(key, f"recv {o.id!r} of {o.size_bytes} bytes as sent by rank {r}{note}", partner.size_bytes)

    # ---- cycles -------------------------------------------------------------------------------
    def check_cycles(self):
        cycle = find_cycle(self.t, self.class_of)
        if cycle:
            self.bad("deps", "no dependency cycle (across ranks, collectives join their members)",
                     " -> ".join(cycle[:6]) + (" ..." if len(cycle) > 6 else ""))


# ---- the class-level graph ------------------------------------------------------------------------

@dataclass
class ClassGraph:
    """One node per distinct op of the classes: a class's compute op ("c", class, id); a collective
    ("g", group or family, id, which member classes); a send/recv pair ("p", id, sending class).
    Nodes are numbered: `keys[i]` is node i's key, `preds[i]` the nodes it waits for, `info[i]` a
    (class, op) that holds it (the send, for a pair). `exact`: every class is symmetric (its ranks
    see the same classes around them), so longest paths here are the per-rank ones; without it
    only "no cycle here, so none per rank" holds."""

    keys: list
    preds: list
    info: list
    exact: bool


def class_graph(t: Trace, class_of=None) -> ClassGraph:
    """The dependency graph merged across ranks, at the level of classes (validated traces only)."""
    if class_of is None:
        class_of = t.class_array()
    lay = t.layout
    fams = lay.families if lay is not None else ()
    exact = True
    combos: dict = {}  # (family, class) -> combo id, or None when its groups differ
    used = {(o.group, c) for c, cls in enumerate(t.classes) for o in cls.ops
            if o.kind == "collective" and o.group in fams}
    for f in {f for f, _ in used}:
        per_group = group_combos(t, f, class_of)
        for _, c in [u for u in used if u[0] == f]:
            ids = np.unique(per_group[lay.group_index(f, t.classes[c].ranks)])
            combos[(f, c)] = int(ids[0]) if ids.size == 1 else None
        if any(combos[(f, c)] is None for g, c in used if g == f):
            exact = False
            for g, c in used:
                if g == f:
                    combos[(f, c)] = None
    sources: dict = {}

    def other_classes(c, peer):
        key = (c, peer)
        if key not in sources:
            ranks = t.classes[c].ranks
            rule = parse_peer(peer)
            q = np.full(ranks.size, peer, dtype=np.int64) if rule is None else lay.shift(ranks, *rule)
            sources[key] = np.unique(class_of[q]).tolist()
        return sources[key]

    shared: dict = {}  # key -> node, for the nodes that ops of several classes or ranks merge into
    keys: list = []
    preds: list = []
    info: list = []

    def node(key, c, o):
        i = shared.get(key)
        if i is None:
            i = shared[key] = len(keys)
            keys.append(key)
            preds.append([])
            info.append((c, o))
        elif o.kind == "send":
            info[i] = (c, o)
        return i

    for c, cls in enumerate(t.classes):
        local: dict = {}  # op id -> its nodes: one, except a recv whose senders lie in several classes
        for o in cls.ops:
            kind = o.kind
            if kind == "compute":  # never merged: no lookup needed
                local[o.id] = (len(keys),)
                keys.append(("c", c, o.id))
                preds.append([])
                info.append((c, o))
            elif kind == "collective":
                local[o.id] = (node(("g", o.group, o.id, combos.get((o.group, c))), c, o),)
            elif kind == "send":
                local[o.id] = (node(("p", o.id, c), c, o),)
                if exact and len(other_classes(c, o.peer)) != 1:
                    exact = False
            else:
                src = other_classes(c, o.peer)
                local[o.id] = tuple(node(("p", o.id, s), c, o) for s in src)
                if len(src) != 1:
                    exact = False
        for o in cls.ops:
            deps = o.deps
            if not deps:
                continue
            before = [x for d in deps for x in local[d]]
            for i in local[o.id]:
                preds[i].extend(before)
    return ClassGraph(keys, preds, info, exact)


def order_of(preds: list) -> list:
    """Kahn's algorithm over numbered nodes; fewer nodes than given when there is a cycle."""
    indeg = [len(p) for p in preds]
    succs: list = [[] for _ in preds]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    ready = [k for k, d in enumerate(indeg) if d == 0]
    order = []
    append, pop = order.append, ready.pop
    while ready:
        k = pop()
        append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def group_combos(t: Trace, f: str, class_of) -> np.ndarray:
    """For each group of family f, an id of the set of classes its members belong to."""
    lay = t.layout
    ranks = np.arange(t.nranks, dtype=np.int64)
    gidx = lay.group_index(f, ranks)
    k = len(t.classes) + 1
    pairs = np.unique(gidx * k + (class_of + 1))
    g, cl = pairs // k, pairs % k - 1
    count = np.bincount(g, minlength=lay.group_count(f))
    combo = np.full(lay.group_count(f), -1, dtype=np.int64)
    single = count[g] == 1
    combo[g[single]] = cl[single]
    multi = np.flatnonzero(count > 1)
    if multi.size:
        interned: dict = {}
        starts = np.searchsorted(g, multi)
        for gi, s in zip(multi.tolist(), starts.tolist()):
            key = tuple(cl[s:s + count[gi]].tolist())
            combo[gi] = k + interned.setdefault(key, len(interned))
    return combo


def fingerprint(t: Trace):
    """What a checked class graph depends on, short of the ops' fields (ops are read-only)."""
    return (id(t.layout), tuple((id(c.ops), len(c.ops), id(c.ranks)) for c in t.classes))


def checked_graph(t: Trace):
    """(ClassGraph, topological order) of the last successful validate() of `t`, if still valid."""
    cached = getattr(t, "_checked", None)
    if cached is not None and cached[0] == fingerprint(t):
        return cached[1], cached[2]
    return None


def find_cycle(t: Trace, class_of=None) -> list[str] | None:
    """A dependency cycle across ranks, described node by node, or None."""
    g = class_graph(t, class_of)
    order = order_of(g.preds)
    if len(order) == len(g.preds):
        t._checked = (fingerprint(t), g, order)
        return None
    if any(len(c) > 1 for c in t.classes):
        # A cycle between classes may wind through ranks that are all different: ask the ranks.
        total = t.op_count()
        if total > MAX_EXPANDED_OPS:
            raise InputError("deps", f"a dependency graph dtnet can check: the class-level graph has a cycle "
                             f"and the per-rank check stops at {MAX_EXPANDED_OPS} ops", f"{total} ops")
        t = t.expanded()
        g = class_graph(t)
        order = order_of(g.preds)
        if len(order) == len(g.preds):
            return None
    return [describe(t, g.keys[i], g.info[i]) for i in _cycle(g.preds, order)]


def _cycle(preds, order):
    """A cycle among the nodes Kahn's algorithm could not order: walk predecessors until one repeats."""
    left = set(range(len(preds))) - set(order)
    node, seen = min(left), []
    while node not in seen:
        seen.append(node)
        node = next(p for p in preds[node] if p in left)
    return seen[seen.index(node):][::-1]


def describe(t: Trace, key, info) -> str:
    """A node for people: "id@rank3", "id@tp-p0-d0" (or "id@tp" for a family), "id(0->1)"."""
    c, o = info
    cls = t.classes[c]
    if key[0] == "c":
        return f"{key[2]}@rank{int(cls.ranks[0])}" if len(cls) == 1 else f"{key[2]}@{cls.label()}"
    if key[0] == "g":
        return f"{key[2]}@{key[1]}"
    if len(cls) == 1:
        r = int(cls.ranks[0])
        a, b = (r, t.peer_of(r, o.peer)) if o.kind == "send" else (t.peer_of(r, o.peer), r)
        return f"{key[1]}({a}->{b})"
    return f"{key[1]}({t.classes[key[2]].label()}->...)"
