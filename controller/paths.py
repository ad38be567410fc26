"""Shortest paths over the OpenFlow part of a fabric, computed on demand.

``ShortestPaths`` answers "which ports of this switch lie on a shortest path
to that switch" for the pairs that are asked, one breadth-first search per
destination switch (in C, through scipy), cached. Nothing is computed for
all pairs up front, so a k=64 fat-tree (65,536 hosts, 5,120 switches) costs
only what its flows touch. Hosts of rail-optimized fabrics reach each other
through rails and spines here, never through NVLink bridges.
"""
from __future__ import annotations

import itertools
import zlib
from collections import deque
from itertools import compress
from operator import itemgetter
from typing import Sequence

import numpy as np

from topologies.fabric import Fabric

Link = tuple  # (from node, to node): one direction of a cable
# Below this many (switch, neighbour) entries a breadth-first search in Python is
# quicker than the call into scipy; both give the same hop counts.
PYTHON_BFS_MAX = 4096


def path_links(src: str, path: Sequence[str], dst: str) -> list[Link]:
    """Directed links of a host-to-host path over switches ``path``."""
    nodes = [src, *path, dst]
    return list(zip(nodes, nodes[1:]))


def fmix32(h: int) -> int:
    """Murmur3's finalizer: avalanches every input bit (crc32 alone is linear,
    so salting it would leave the choices of all switches correlated)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def five_tuple_hash(src_ip, dst_ip, proto, sport, dport, salt: int) -> int:
    """The per-flow hash of a select group, salted per switch like independent ECMP seeds.
    The fake network hashes packets with it, so a path walk agrees with the fake switches."""
    key = f"{src_ip}|{dst_ip}|{proto}|{sport}|{dport}"
    return fmix32(zlib.crc32(key.encode()) ^ fmix32(salt))


class ShortestPaths:
    """Per destination switch, the ports of every switch that lie on a shortest path to it.

    ``down`` holds links (frozensets of two node names) to route around. Distances
    to a destination switch are computed the first time it is asked for, and port
    sets the first time a (switch, destination) pair is.
    """

    def __init__(self, fabric: Fabric, down: frozenset = frozenset()):
        self.fabric = fabric
        self.down = frozenset(down)
        self.switches = fabric.openflow_switches
        self.index = {s: i for i, s in enumerate(self.switches)}
        # Per switch: (peer index, port) in port order, so that a port set comes out sorted.
        adj: list[list[tuple[int, int]]] = [[] for _ in self.switches]
        self._peer: dict[tuple[str, int], str] = {}
        self.attach: dict[str, tuple[str, int]] = {}
        nodes = fabric.graph.nodes
        down = self.down
        eth: dict[str, int] = {}  # host -> the host-side port of its attachment
        for a, b, d in fabric.graph.edges(data=True):
            if down and frozenset((a, b)) in down:
                continue
            ia, ib = self.index.get(a), self.index.get(b)
            if ia is not None and ib is not None:
                adj[ia].append((ib, d["ports"][a]))
                adj[ib].append((ia, d["ports"][b]))
                self._peer[a, d["ports"][a]] = b
                self._peer[b, d["ports"][b]] = a
            elif d["kind"] == "host":
                h, sw = (a, b) if nodes[a]["role"] == "host" else (b, a)
                # A dual-homed host is reached by its first interface (eth0), as
                # Fabric.attachment says and as the host sends.
                if sw in self.index and (h not in eth or d["ports"][h] < eth[h]):
                    self.attach[h] = (sw, d["ports"][sw])
                    eth[h] = d["ports"][h]
        self._adj = adj
        self._adj_size = sum(len(x) for x in adj)
        self._nbr: list = [None] * len(adj)  # per switch, made when first asked: see _neighbours
        self._graph = None  # the CSR matrix, built on the first distance asked for
        self._named = None  # the same graph with neighbours in name order, for path_matrix
        self.large = self._adj_size > PYTHON_BFS_MAX  # arrays (and scipy's search) pay off beyond this
        self._dist: dict[str, list[int]] = {}
        self._dist_np: dict[str, np.ndarray] = {}
        self._ports: dict[tuple[str, str], tuple[int, ...] | None] = {}
        self._next: dict[tuple[str, str], list[str]] = {}

    # -- distances ------------------------------------------------------------
    def _distances(self, dst_switch: str) -> list[int]:
        """Hop counts of every switch (by index) to dst_switch (-1: unreachable)."""
        dist = self._dist.get(dst_switch)
        if dist is None:
            if self.large:
                dist = self.dist_array(dst_switch).tolist()
            else:
                dist = self._bfs_python(self.index[dst_switch])
            self._dist[dst_switch] = dist
        return dist

    def dist_array(self, dst_switch: str) -> np.ndarray:
        """Hop counts to dst_switch as a numpy array (by switch index), for array code."""
        arr = self._dist_np.get(dst_switch)
        if arr is None:
            if self.large:
                arr = self._bfs_scipy(self.index[dst_switch])
            else:
                arr = np.array(self._distances(dst_switch), dtype=np.int32)
            self._dist_np[dst_switch] = arr
        return arr

    def _bfs_python(self, j: int) -> list[int]:
        dist = [-1] * len(self.switches)
        dist[j] = 0
        q = deque([j])
        while q:
            u = q.popleft()
            du = dist[u] + 1
            for v, _ in self._adj[u]:
                if dist[v] < 0:
                    dist[v] = du
                    q.append(v)
        return dist

    def _bfs_scipy(self, j: int) -> list[int]:
        # Imported here: only fabrics past PYTHON_BFS_MAX need it, and scipy.sparse.csgraph costs a
        # quarter of a second of start-up to every command that reads an experiment.
        import scipy.sparse as sp
        from scipy.sparse import csgraph

        if self._graph is None:
            rows = [i for i, x in enumerate(self._adj) for _ in x]
            cols = [peer for x in self._adj for peer, _ in x]
            n = len(self.switches)
            # float64: what csgraph works in, so it does not convert the matrix on every call.
            self._graph = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
        # Both directions of every cable are in the matrix: directed saves scipy a transpose.
        order, pred = csgraph.breadth_first_order(self._graph, j, directed=True, return_predecessors=True)
        arr = np.full(len(self.switches), -1, np.int32)
        arr[j] = 0
        rest = order[1:]
        parents = pred[rest]
        # BFS order lists parents before children: the depth settles after
        # as many passes as the deepest level.
        while True:
            new = arr[parents] + 1
            if np.array_equal(new, arr[rest]):
                break
            arr[rest] = new
        return arr

    @property
    def searches(self) -> int:
        """How many destination switches have been searched (each costs one breadth-first search)."""
        return len(self._dist.keys() | self._dist_np.keys())

    def distances(self, dst_switch: str) -> dict[str, int]:
        """switch -> hops to dst_switch, for the switches that reach it."""
        dist = self._distances(dst_switch)
        return {self.switches[i]: d for i, d in enumerate(dist) if d >= 0}

    def distance(self, switch: str, dst_switch: str) -> int | None:
        d = self._distances(dst_switch)[self.index[switch]]
        return d if d >= 0 else None

    # -- next hops ------------------------------------------------------------
    def ports(self, switch: str, dst_switch: str) -> tuple[int, ...] | None:
        """The sorted ports of switch on a shortest path to dst_switch: () at dst_switch,
        None when dst_switch is unreachable from switch."""
        key = (switch, dst_switch)
        out = self._ports.get(key, False)
        if out is not False:
            return out
        dist = self._distances(dst_switch)
        i = self.index[switch]
        di = dist[i]
        if di < 0:
            out = None
        elif di == 0:
            out = ()
        else:
            get, ports = self._nbr[i] or self._neighbours(i)
            out = tuple(compress(ports, map((di - 1).__eq__, get(dist))))
        self._ports[key] = out
        return out

    def _neighbours(self, i: int):
        """(a getter of the neighbours' entries of a distance list, in one C call; their
        ports), in port order so that port sets come out sorted."""
        x = sorted(self._adj[i], key=lambda t: t[1])
        get = itemgetter(*(j for j, _ in x)) if len(x) > 1 else \
            (lambda dist, j=x[0][0]: (dist[j],)) if x else (lambda dist: ())
        self._nbr[i] = (get, tuple(p for _, p in x))
        return self._nbr[i]

    def toward(self, dst_switch: str) -> dict[str, tuple[int, ...]]:
        """switch -> ports toward dst_switch, for every switch that reaches it (() at dst_switch)."""
        dist = self._distances(dst_switch)
        return {s: self.ports(s, dst_switch) for s, d in zip(self.switches, dist) if d >= 0}

    def neighbor(self, switch: str, port: int) -> str:
        try:
            return self._peer[switch, port]
        except KeyError:
            raise KeyError(f"{switch} has no switch on port {port}") from None

    def compute_all(self) -> None:
        """Distances to every switch that has hosts (what an all-pairs table would need)."""
        for d in sorted({sw for sw, _ in self.attach.values()}):
            self._distances(d)

    # -- paths ----------------------------------------------------------------
    def _next_names(self, node: str, d: str) -> list[str]:
        """The next switches from node toward d, by name."""
        key = (node, d)
        out = self._next.get(key)
        if out is None:
            out = self._next[key] = sorted(self._peer[node, p] for p in self.ports(node, d))
        return out

    def equal_cost_paths(self, src: str, dst: str, limit: int | None = None) -> list[tuple[str, ...]]:
        """The first ``limit`` (all when None) shortest switch paths from src host's switch to
        dst host's, sorted; [] when dst is unreachable over OpenFlow."""
        if self.large:
            m = self.path_matrix(src, dst, limit)
            names = self.switches
            return [] if m is None else [tuple(names[i] for i in row) for row in m.tolist()]
        return self._equal_cost_paths(src, dst, limit)

    def _equal_cost_paths(self, src: str, dst: str, limit: int | None) -> list[tuple[str, ...]]:
        if src not in self.attach or dst not in self.attach:
            return []
        s, d = self.attach[src][0], self.attach[dst][0]
        if self.ports(s, d) is None:
            return []
        # Level by level, children by name: the prefixes stay sorted, and as every prefix
        # leads to d at least once, the first `limit` paths extend the first `limit` prefixes.
        frontier, nxt = [(s,)], self._next_names
        while frontier[0][-1] != d:
            grown = (p + (n,) for p in frontier for n in nxt(p[-1], d))
            frontier = list(grown if limit is None else itertools.islice(grown, limit))
        return frontier

    def path_matrix(self, src: str, dst: str, limit: int | None = None) -> np.ndarray | None:
        """What equal_cost_paths lists, as rows of switch indices (``self.switches``), built
        level by level on arrays; None when dst is unreachable over OpenFlow."""
        if src not in self.attach or dst not in self.attach:
            return None
        s, d = self.index[self.attach[src][0]], self.index[self.attach[dst][0]]
        dist = self.dist_array(self.switches[d])
        hops = int(dist[s])
        if hops < 0:
            return None
        indptr, nbr = self._by_name()
        frontier = np.array([[s]], dtype=np.int64)
        for level in range(hops):
            u = frontier[:, -1]
            starts = indptr[u]
            counts = indptr[u + 1] - starts
            rows = np.repeat(np.arange(len(u)), counts)
            pos = np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
            v = nbr[pos]
            keep = dist[v] == hops - level - 1
            rows, v = rows[keep], v[keep]
            # Rows stay in name order; every prefix leads to d, so the first `limit` do.
            if limit is not None and len(v) > limit:
                rows, v = rows[:limit], v[:limit]
            frontier = np.column_stack([frontier[rows], v])
        return frontier

    def _by_name(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, neighbours) of the switch graph, each switch's neighbours in name order."""
        if self._named is None:
            names = self.switches
            counts = [len(x) for x in self._adj]
            nbr = [j for x in self._adj for j in sorted((j for j, _ in x), key=names.__getitem__)]
            self._named = (np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), np.array(nbr, dtype=np.int64))
        return self._named

    def count_paths(self, src: str, dst: str) -> int:
        """How many shortest paths there are, without listing them."""
        if src not in self.attach or dst not in self.attach:
            return 0
        s, d = self.attach[src][0], self.attach[dst][0]
        if self.ports(s, d) is None:
            return 0
        memo: dict[str, int] = {d: 1}

        def count(node):
            if node not in memo:
                memo[node] = sum(count(n) for n in self._next_names(node, d))
            return memo[node]
        return count(s)
