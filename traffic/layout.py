"""The parallel layout: how global ranks map to (tp, dp, pp) coordinates, and the communicator
groups and pipeline peers that follow from it by rule, so a trace never lists them rank by rank.

Megatron's order by default: tp varies fastest, then dp, then pp. For expert parallelism the dp
coordinate d splits into d % ep (the expert-parallel index, fastest) and d // ep. Every function
that takes ranks takes a numpy array (or anything np.asarray accepts) and works on all at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

DIMS = ("tp", "dp", "pp")
# Group families: which coordinate varies inside a group; the others name it.
FAMILIES = ("tp", "dp", "pp", "ep", "edp")
_NAME = {  # family -> (name pattern, the coordinates in the name)
    "tp": ("tp-p{p}-d{d}", ("p", "d")),
    "dp": ("dp-p{p}-t{t}", ("p", "t")),
    "pp": ("pp-t{t}-d{d}", ("t", "d")),
    "ep": ("ep-p{p}-t{t}-g{g}", ("p", "t", "g")),
    "edp": ("edp-p{p}-t{t}-x{x}", ("p", "t", "x")),
}
_NAME_RE = {f: re.compile("^" + pat.replace("{", "(?P<").replace("}", r">0|[1-9][0-9]*)") + r"\Z")
            for f, (pat, _) in _NAME.items()}
PEER_RE = re.compile(r"^(tp|dp|pp)([+-])([1-9][0-9]*)\Z")  # \Z: "$" lets a trailing newline in


@dataclass(frozen=True)
class Layout:
    """tp x dp x pp ranks in `order` (fastest first); `families` are the group families in use."""

    tp: int
    dp: int
    pp: int
    ep: int = 1
    order: tuple = ("tp", "dp", "pp")
    families: tuple = ()
    _strides: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        size = {"tp": self.tp, "dp": self.dp, "pp": self.pp}
        stride, out = 1, {}
        for dim in self.order:
            out[dim] = stride
            stride *= size[dim]
        object.__setattr__(self, "_strides", out)

    @property
    def nranks(self) -> int:
        return self.tp * self.dp * self.pp

    def size(self, dim: str) -> int:
        return {"tp": self.tp, "dp": self.dp, "pp": self.pp}[dim]

    def stride(self, dim: str) -> int:
        return self._strides[dim]

    def coords(self, ranks):
        """(t, d, p) arrays (or ints) of these ranks."""
        r = np.asarray(ranks, dtype=np.int64)
        return tuple((r // self._strides[dim]) % self.size(dim) for dim in DIMS)

    def rank(self, t, d, p):
        st, sd, sp = (self._strides[x] for x in DIMS)
        return t * st + d * sd + p * sp

    # ---- group families ---------------------------------------------------------------------
    def family_size(self, family: str) -> int:
        """Ranks in each group of the family."""
        return {"tp": self.tp, "dp": self.dp, "pp": self.pp, "ep": self.ep, "edp": self.dp // self.ep}[family]

    def group_count(self, family: str) -> int:
        return self.nranks // self.family_size(family)

    def _fixed(self, family, t, d, p):
        """The coordinates that name the group, as in the family's name pattern."""
        c = {"t": t, "d": d, "p": p, "g": d // self.ep, "x": d % self.ep}
        return [c[k] for k in _NAME[family][1]]

    def _radix(self, family):
        return [{"t": self.tp, "d": self.dp, "p": self.pp, "g": self.dp // self.ep, "x": self.ep}[k]
                for k in _NAME[family][1]]

    def group_index(self, family: str, ranks):
        """Index (0 .. group_count-1) of the family's group that holds each rank."""
        t, d, p = self.coords(ranks)
        idx = 0
        for value, n in zip(self._fixed(family, t, d, p), self._radix(family)):
            idx = idx * n + value
        return idx

    def local_rank(self, family: str, ranks):
        """Each rank's position inside its group of the family (group-local rank)."""
        t, d, p = self.coords(ranks)
        return {"tp": t, "dp": d, "pp": p, "ep": d % self.ep, "edp": d // self.ep}[family]

    def group_first(self, family: str, ranks):
        """The first member (group-local rank 0) of each rank's group in the family."""
        r = np.asarray(ranks, dtype=np.int64)
        sd = self._strides["dp"]
        step = {"tp": self._strides["tp"], "dp": sd, "pp": self._strides["pp"], "ep": sd, "edp": sd * self.ep}
        return r - self.local_rank(family, r) * step[family]

    def group_name(self, family: str, index: int) -> str:
        values, out = [], int(index)
        for n in reversed(self._radix(family)):
            out, v = divmod(out, n)
            values.append(v)
        keys = _NAME[family][1]
        return _NAME[family][0].format(**dict(zip(keys, reversed(values))))

    def group_members(self, family: str, index: int) -> list[int]:
        """The group's ranks in group-local order."""
        values, out = {}, int(index)
        keys = _NAME[family][1]
        for k, n in zip(reversed(keys), reversed(self._radix(family))):
            out, values[k] = divmod(out, n)
        n = self.family_size(family)
        x = np.arange(n, dtype=np.int64)
        t, d, p = values.get("t"), values.get("d"), values.get("p")
        if family == "tp":
            t = x
        elif family == "dp":
            d = x
        elif family == "pp":
            p = x
        elif family == "ep":
            d = values["g"] * self.ep + x
        else:
            d = values["x"] + x * self.ep
        return self.rank(t, d, p).tolist()

    def parse_group(self, name: str):
        """(family, index) for a name this layout gives a group in one of its families, else None."""
        if not isinstance(name, str):
            return None
        family = name.split("-", 1)[0]
        if family not in self.families:
            return None
        m = _NAME_RE[family].match(name)
        if not m:
            return None
        idx = 0
        for k, n in zip(_NAME[family][1], self._radix(family)):
            v = int(m.group(k))
            if v >= n:
                return None
            idx = idx * n + v
        return family, idx

    def groups(self):
        """(name, members) of every group of every family in use, family by family."""
        for family in self.families:
            for i in range(self.group_count(family)):
                yield self.group_name(family, i), self.group_members(family, i)

    def group_total(self) -> int:
        return sum(self.group_count(f) for f in self.families)

    # ---- peers and rank sets ----------------------------------------------------------------
    def shift(self, ranks, dim: str, k: int):
        """The ranks whose `dim` coordinate is each rank's plus k (mod the dim's size)."""
        r = np.asarray(ranks, dtype=np.int64)
        n, s = self.size(dim), self._strides[dim]
        c = (r // s) % n
        return r + (((c + k) % n) - c) * s

    def select(self, fixed: dict) -> np.ndarray:
        """Ascending ranks whose coordinates lie in `fixed` (dim -> list of coordinates)."""
        r = np.zeros(1, dtype=np.int64)
        for dim in DIMS:
            vals = np.asarray(sorted(fixed[dim]) if dim in fixed else range(self.size(dim)), dtype=np.int64)
            r = np.add.outer(r, vals * self._strides[dim]).ravel()
        return np.sort(r)

    def to_dict(self) -> dict:
        return {"tp": self.tp, "dp": self.dp, "pp": self.pp, "ep": self.ep, "order": "-".join(self.order),
                "groups": list(self.families)}


def parse_peer(value):
    """(dim, k) for a rule like "pp+1", else None."""
    m = PEER_RE.match(value) if isinstance(value, str) else None
    if not m:
        return None
    return m.group(1), int(m.group(3)) * (1 if m.group(2) == "+" else -1)


def peer_rule(layout: Layout, rank: int, peer: int):
    """The rule string ("pp+1") that gives `peer` from `rank`: they differ in one coordinate."""
    a, b = layout.coords(rank), layout.coords(peer)
    diff = [i for i in range(3) if a[i] != b[i]]
    if len(diff) != 1:
        return None
    dim = DIMS[diff[0]]
    n = layout.size(dim)
    k = int(b[diff[0]] - a[diff[0]]) % n
    if k > n // 2:
        k -= n
    return f"{dim}{k:+d}"


# ---- rank lists as ints and [start, stop] runs -------------------------------------------------

def encode_runs(ranks) -> list:
    """Ascending ranks as ints and [start, stop) runs: [0, [2, 9]] is 0, 2, 3, ..., 8."""
    r = np.asarray(ranks, dtype=np.int64)
    if r.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(r) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [r.size]))
    out: list = []
    for a, b in zip(r[starts].tolist(), r[stops - 1].tolist()):
        out.append(a if a == b else [a, b + 1])
    return out


def decode_runs(value, limit: int):
    """The ranks of encode_runs' form; a str saying what is wrong when it is not that form, or when
    it holds more than `limit` ranks (a run like [0, 10**15] must not allocate)."""
    if not isinstance(value, list):
        return "a list of ranks and [start, stop] runs"
    parts, total = [], 0
    for e in value:
        if isinstance(e, int) and not isinstance(e, bool):
            parts.append(np.array([e], dtype=np.int64))
            total += 1
        elif isinstance(e, list) and len(e) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in e) \
                and e[0] < e[1]:
            total += e[1] - e[0]
            if total > limit:
                return f"at most {limit} ranks"
            parts.append(np.arange(e[0], e[1], dtype=np.int64))
        else:
            return "a list of ranks and [start, stop] runs (start < stop)"
        if total > limit:
            return f"at most {limit} ranks"
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
