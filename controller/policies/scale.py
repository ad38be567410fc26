"""What lets congestion-aware keep up at 65,536 hosts, with the same decisions as the plain loops.

- ``LinkIndex``: an integer per directed link, so loads, pending demands and
  capacities are arrays and a path's links are a row of ids.
- ``Candidates``: each (source switch, destination switch) pair's candidate
  paths, listed and hashed once per version of the shortest paths; flows between
  the same two switches share them.
- ``PendingDemands``: Hedera's natural demands of the flows not measured yet and
  what they put on each link, kept up to date as flows arrive. Demand estimation
  works on each connected set of senders and receivers on its own, so a new flow
  changes only the demands of the flows it shares a sender or a receiver with
  (transitively), and only their links need summing again.

Sums run in the order the plain code sums them and rounding is Python's own, so
every choice is the one the per-path loop makes (tests/unit/controller/test_controller_scale.py).
"""
from __future__ import annotations

import zlib
from collections import defaultdict

import numpy as np

from controller.hedera import EPS, estimate_demands
from controller.paths import ShortestPaths, path_links


class LinkIndex:
    """An integer id per directed link of the OpenFlow-steered fabric (host and fabric
    links), capacities and current loads as arrays over those ids."""

    def __init__(self, fabric):
        self.id: dict[tuple[str, str], int] = {}
        caps = []
        for a, b, d in fabric.graph.edges(data=True):
            if d["kind"] == "nvlink":
                continue
            for ln in ((a, b), (b, a)):
                self.id[ln] = len(caps)
                caps.append(d["link_gbps"])
        self.cap = np.array(caps, dtype=float)
        # Each host's NIC rate (its host link), for demands in Gb/s.
        self.nic_gbps = {}
        nodes = fabric.graph.nodes
        for a, b, d in fabric.graph.edges(data=True):
            if d["kind"] == "host":
                self.nic_gbps[a if nodes[a]["role"] == "host" else b] = d["link_gbps"]
        self.cap_eps = self.cap * (1 + EPS)  # what first fit compares against, as the plain loop does
        self.load = np.zeros(len(caps))
        self.pend = np.zeros(len(caps))  # PendingDemands keeps it
        self.busy = np.zeros(len(caps))  # load + pend, link by link, as the plain loop adds them
        self._loads_version = object()

    def ids(self, src: str, path, dst: str) -> list[int]:
        lid = self.id
        return [lid[ln] for ln in path_links(src, path, dst)]

    def sync_loads(self, loads) -> None:
        """The engine's current loads into ``self.load`` (only when they changed)."""
        version = getattr(loads, "version", None)
        if version is not None and version == self._loads_version:
            return
        self.load[:] = 0.0
        lid = self.id
        for ln, gbps in loads.nonzero():
            i = lid.get(ln)
            if i is not None:
                self.load[i] = gbps
        self.busy = self.load + self.pend
        self._loads_version = version

    def switch_link_ids(self, sp: ShortestPaths, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Link ids of the switch-to-switch links u[i] -> v[i] (switch indices of sp)."""
        keys, ids = self._switch_keys(sp)
        n = len(sp.switches)
        return ids[np.searchsorted(keys, u * n + v)]

    def _switch_keys(self, sp: ShortestPaths):
        if getattr(self, "_keys_for", None) is not sp:
            n, index = len(sp.switches), sp.index
            pairs = [(index[a] * n + index[b], i) for (a, b), i in self.id.items() if a in index and b in index]
            pairs.sort()
            self._keys = (np.array([k for k, _ in pairs], dtype=np.int64), np.array([i for _, i in pairs], np.int64))
            self._pieces = ([(repr(n) + ", ").encode() for n in sp.switches],
                            [(repr(n) + ")").encode() for n in sp.switches])
            self._keys_for = sp
        return self._keys

    def repr_pieces(self, sp: ShortestPaths) -> tuple[list, list]:
        """Per switch index of sp, the bytes its name adds to a tuple's repr in the middle
        ("'name', ") and at the end ("'name')")."""
        self._switch_keys(sp)
        return self._pieces

    def set_pend(self, ids: list[int], gbps: list[float]) -> None:
        self.pend[ids] = gbps
        self.busy[ids] = self.load[ids] + self.pend[ids]


class CandidateSet:
    """One pair of switches' candidate paths (the first max_paths, sorted): their
    switch-to-switch links as a matrix of link ids, their capacities, each path's hash.
    ``paths`` (name tuples) and ``index`` (path -> position) are made when first asked for."""
    __slots__ = ("rows", "names", "inner", "cap", "crc", "_paths", "_index")

    def __init__(self, paths: list, links: LinkIndex, rows: np.ndarray | None = None, names=None,
                 inner: np.ndarray | None = None, crc: np.ndarray | None = None):
        self._paths, self._index = paths, None
        self.rows, self.names = rows, names
        if inner is None:
            lid = links.id
            inner = np.array([[lid[ln] for ln in zip(p, p[1:])] for p in paths], dtype=np.int64) \
                .reshape(len(paths), len(paths[0]) - 1)
            crc = np.array([zlib.crc32(repr(p).encode()) for p in paths], dtype=np.int64)
        self.inner, self.crc = inner, crc
        self.cap = links.cap[inner]

    @classmethod
    def from_matrix(cls, sp: ShortestPaths, rows: np.ndarray, links: LinkIndex) -> "CandidateSet":
        """From ShortestPaths.path_matrix: link ids looked up on arrays, hashes from the
        names' reprs (what repr(path) spells), no name tuples made."""
        names = sp.switches
        inner = links.switch_link_ids(sp, rows[:, :-1], rows[:, 1:])
        if rows.shape[1] == 1:
            crc = [zlib.crc32(repr((names[int(rows[0, 0])],)).encode())] * len(rows)
        else:
            crc = _path_crcs(rows, *links.repr_pieces(sp))
        return cls(None, links, rows, names, inner, np.array(crc, dtype=np.int64))

    def __len__(self):
        return len(self.crc)

    def path(self, i: int) -> tuple[str, ...]:
        if self._paths is not None:
            return self._paths[i]
        return tuple(self.names[j] for j in self.rows[i].tolist())

    @property
    def paths(self) -> list:
        if self._paths is None:
            names = self.names
            self._paths = [tuple(names[j] for j in row) for row in self.rows.tolist()]
        return self._paths

    @property
    def index(self) -> dict:
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self.paths)}
        return self._index


class Candidates:
    """CandidateSets by (source switch, destination switch), for one ShortestPaths at a time."""

    def __init__(self, links: LinkIndex, max_entries: int = 1 << 14):
        self.links = links
        self.max_entries = max_entries
        self._paths: ShortestPaths | None = None
        self._sets: dict = {}

    def get(self, paths: ShortestPaths, src: str, dst: str, limit: int) -> CandidateSet | None:
        if paths is not self._paths:  # links changed: every list is stale
            self._paths, self._sets = paths, {}
        at_s, at_d = paths.attach.get(src), paths.attach.get(dst)
        if at_s is None or at_d is None:
            return None
        key = (at_s[0], at_d[0], limit)
        cs = self._sets.get(key, False)
        if cs is False:
            if len(self._sets) >= self.max_entries:
                self._sets.clear()
            if paths.large:
                rows = paths.path_matrix(src, dst, limit)
                cs = None if rows is None else CandidateSet.from_matrix(paths, rows, self.links)
            else:
                found = paths.equal_cost_paths(src, dst, limit)
                cs = CandidateSet(found, self.links) if found else None
            self._sets[key] = cs
        return cs


def _path_crcs(rows: np.ndarray, mid: list, last: list) -> list[int]:
    """crc32(repr(path)) of every row, sharing the crc of the prefix a row has in common with
    the one before it (sorted rows share long prefixes). A tuple's repr is '(' + 'a', ... + ')'."""
    n, width = rows.shape
    differs = rows[1:] != rows[:-1]
    first = [0] + (np.argmax(differs, axis=1)).tolist()
    stack = [zlib.crc32(b"(")] + [0] * width
    out = []
    for r, row in enumerate(rows.tolist()):
        for j in range(first[r], width - 1):
            stack[j + 1] = zlib.crc32(mid[row[j]], stack[j])
        out.append(zlib.crc32(last[row[-1]], stack[width - 1]))
    return out


def round9(values: np.ndarray) -> np.ndarray:
    """Python's round(x, 9) of every value. Away from a halfway point the nearest integer
    to x * 1e9, divided by 1e9 (one correctly rounded division), is what Python gives;
    values near one, where x * 1e9's own rounding could tip it, get Python's round."""
    y = values * 1e9
    out = np.rint(y) / 1e9
    risky = (np.abs(y - np.floor(y) - 0.5) <= np.maximum(1e-6, 4 * np.spacing(y))) | ~(np.abs(y) < 2.0 ** 50)
    if risky.any():
        out[risky] = [round(float(v), 9) for v in values[risky]]
    return out


def least_loaded(cs: CandidateSet, links: LinkIndex, salt: int) -> int:
    """The index of the path with the least (max, sum) utilization of its switch-to-switch
    links (loads plus pending demands), ties broken by the path's hash salted by the flow's."""
    if cs.inner.shape[1] == 0:
        return int(np.argmin(cs.crc ^ salt))
    busy = links.busy[cs.inner]
    if not busy.any():  # idle: every cost is (0, 0)
        return int(np.argmin(cs.crc ^ salt))
    u = busy / cs.cap
    peak = u.max(axis=1)
    # The paths whose rounded peak can be the least; equal values round alike, so only
    # different ones need rounding.
    c = np.flatnonzero(peak <= peak.min() + 2e-9)
    if len(c) > 1:
        pc = peak[c]
        if (pc != pc[0]).any():
            r = round9(pc)
            c = c[r == r.min()]
    if len(c) > 1:
        uc = u[c]
        total = uc[:, 0].copy()
        for k in range(1, uc.shape[1]):  # in path order, as sum() adds
            total += uc[:, k]
        near = total <= total.min() + 2e-9  # the same for the sums
        c, tc = c[near], total[near]
        if (tc != tc[0]).any():
            r = round9(tc)
            c = c[r == r.min()]
    return int(c[np.argmin(cs.crc[c] ^ salt)])


class PendingDemands:
    """Natural demands (Gb/s) of the flows not measured yet, and their sum on every link."""

    def __init__(self, links: LinkIndex, is_elephant, nic_gbps):
        self.links = links
        self.is_elephant = is_elephant
        self.nic_gbps = nic_gbps
        self.version = object()
        self.count = -1

    def sync(self, obs) -> None:
        """Bring the sums (links.pend, links.busy) up to date with obs.flows."""
        v, n = obs.flows_version, len(obs.flows)
        if v is None or v != self.version or n < self.count:
            self._rebuild(obs)
        elif n > self.count:
            new = list(obs.flows.values())[self.count:] if n - self.count > 64 else \
                [f for _, f in zip(range(n - self.count), reversed(obs.flows.values()))][::-1]
            for f in new:
                self._add(f)
            self.count = n

    def _counted(self, f) -> bool:
        """In Hedera's estimate: measured elephants and flows not measured yet (no replies)."""
        return self.is_elephant(f) or (not f.measured and not f.reply)

    def _rebuild(self, obs) -> None:
        self.seq: dict[int, int] = {}
        self.out_of: dict[str, list] = defaultdict(list)
        self.into: dict[str, list] = defaultdict(list)
        self.demand: dict[int, float] = {}
        self.on_link: dict[int, list] = defaultdict(list)
        self.links.pend[:] = 0.0
        self.links.busy = self.links.load.copy()
        everyone = [f for f in obs.flows.values() if self._counted(f)]
        for f in everyone:
            self._register(f)
        frac = estimate_demands([(f.src, f.dst) for f in everyone])
        touched = set()
        for f, x in zip(everyone, frac):
            if not f.measured and not f.reply:
                self.demand[id(f)] = x * self.nic_gbps(f.src)
                if f.path is not None:
                    for i in self.links.ids(f.src, f.path, f.dst):
                        self.on_link[i].append(f)
                        touched.add(i)
        self._resum(touched)
        self.version, self.count = obs.flows_version, len(obs.flows)

    def _register(self, f) -> None:
        self.seq[id(f)] = len(self.seq)
        self.out_of[f.src].append(f)
        self.into[f.dst].append(f)

    def _add(self, f) -> None:
        if not self._counted(f):
            return
        self._register(f)
        # Everything f shares a sender or a receiver with, transitively.
        comp, seen, todo = [], {id(f)}, [f]
        while todo:
            g = todo.pop()
            comp.append(g)
            for h in self.out_of[g.src] + self.into[g.dst]:
                if id(h) not in seen:
                    seen.add(id(h))
                    todo.append(h)
        ids_f = self.links.ids(f.src, f.path, f.dst) if f.path is not None else ()
        if len(comp) == 1:
            if f.measured:  # a measured elephant: counted in others' estimates, pending nothing
                return
            # Alone, a flow's natural demand is its whole NIC (what estimate_demands says too).
            self.demand[id(f)] = self.nic_gbps(f.src)
            for i in ids_f:
                self.on_link[i].append(f)
            self._resum(ids_f)
            return
        comp.sort(key=lambda g: self.seq[id(g)])
        frac = estimate_demands([(g.src, g.dst) for g in comp])
        for i in ids_f:
            self.on_link[i].append(f)
        touched = set()
        for g, x in zip(comp, frac):
            if g.measured or g.reply:
                continue
            d = x * self.nic_gbps(g.src)
            if g is f or self.demand.get(id(g)) != d:
                self.demand[id(g)] = d
                if g.path is not None:
                    touched.update(ids_f if g is f else self.links.ids(g.src, g.path, g.dst))
        self._resum(touched)

    def _resum(self, link_ids) -> None:
        demand, on_link = self.demand, self.on_link
        ids, totals = list(link_ids), []
        for i in ids:
            total = 0.0
            for g in on_link[i]:  # in flow order, as the plain loop adds them
                total = total + demand[id(g)]
            totals.append(total)
        if ids:
            self.links.set_pend(ids, totals)


def first_fit(order, demands, current, candidates, links: LinkIndex, reserved: np.ndarray) -> list:
    """Global First Fit on arrays: per flow (in order), its current path if it has room,
    else the first candidate that has, else None. ``current[i]``: the flow's path links as
    ids; ``candidates[i]``: its CandidateSet and its current path (None: held, only its
    current path counts). Returns per flow the chosen path index in the candidate set, -1
    for its current path, or None."""
    cap_eps = links.cap_eps
    out = []
    for f, d, cur, cand in zip(order, demands, current, candidates):
        if all(reserved[i] + d <= cap_eps[i] for i in cur):
            out.append(-1)
            for i in cur:
                reserved[i] += d
            continue
        pick = None
        if cand is not None:
            cs, here = cand
            ends = (cur[0], cur[-1])  # host links: every candidate shares them
            if all(reserved[i] + d <= cap_eps[i] for i in ends):
                ids = cs.inner
                ok = np.all(reserved[ids] + d <= cap_eps[ids], axis=1) if ids.shape[1] else \
                    np.ones(len(cs), bool)
                skip = cs.index.get(here)  # the current path is not a candidate twice
                if skip is not None:
                    ok[skip] = False
                hit = np.flatnonzero(ok)
                if len(hit):
                    pick = int(hit[0])
                    for i in ends:
                        reserved[i] += d
                    np.add.at(reserved, ids[pick], d)
        out.append(pick)
    return out
