"""Shortest paths over the OpenFlow part of a fabric, computed on demand.

``ShortestPaths`` answers "which ports of this switch lie on a shortest path
to that switch" for the pairs that are asked, one breadth-first search per
destination switch (in C, through scipy), cached. Nothing is computed for
all pairs up front, so a k=64 fat-tree (65,536 hosts, 5,120 switches) costs
only what its flows touch. Hosts of rail-optimized fabrics reach each other
through rails and spines here, never through NVLink bridges.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from topologies.fabric import Fabric

Link = tuple  # (from node, to node): one direction of a cable


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
        n = len(self.switches)
        adj: list[list[tuple[str, int, int]]] = [[] for _ in range(n)]  # (peer name, peer index, port)
        self._peer: dict[tuple[str, int], str] = {}
        rows, cols = [], []
        for a, b, d in fabric.graph.edges(data=True):
            ia, ib = self.index.get(a), self.index.get(b)
            if ia is None or ib is None or frozenset((a, b)) in self.down:
                continue
            adj[ia].append((b, ib, d["ports"][a]))
            adj[ib].append((a, ia, d["ports"][b]))
            self._peer[a, d["ports"][a]] = b
            self._peer[b, d["ports"][b]] = a
            rows += (ia, ib)
            cols += (ib, ia)
        # Neighbours in port order, so that a port set comes out sorted.
        self._adj = [sorted(x, key=lambda t: t[2]) for x in adj]
        self._nbr = [np.fromiter((t[1] for t in x), np.int64, len(x)) for x in self._adj]
        self._nbr_port = [np.fromiter((t[2] for t in x), np.int64, len(x)) for x in self._adj]
        self._graph = sp.csr_matrix((np.ones(len(rows), np.int8), (rows, cols)), shape=(n, n))
        self.attach: dict[str, tuple[str, int]] = {}
        for a, b, d in fabric.graph.edges(data=True):
            if d["kind"] != "host":
                continue
            h, sw = (a, b) if fabric.graph.nodes[a]["role"] == "host" else (b, a)
            if sw in self.index and frozenset((h, sw)) not in self.down:
                self.attach[h] = (sw, d["ports"][sw])
        self._dist: dict[int, np.ndarray] = {}
        self._ports: dict[tuple[int, int], tuple[int, ...] | None] = {}

    # -- distances ------------------------------------------------------------
    def _distances(self, j: int) -> np.ndarray:
        """Hop counts of every switch to switch j (-1: unreachable)."""
        dist = self._dist.get(j)
        if dist is None:
            order, pred = csgraph.breadth_first_order(self._graph, j, directed=False, return_predecessors=True)
            dist = np.full(len(self.switches), -1, np.int32)
            dist[j] = 0
            rest = order[1:]
            parents = pred[rest]
            # BFS order lists parents before children: the depth settles after
            # as many passes as the deepest level.
            while True:
                new = dist[parents] + 1
                if np.array_equal(new, dist[rest]):
                    break
                dist[rest] = new
            self._dist[j] = dist
        return dist

    def distances(self, dst_switch: str) -> dict[str, int]:
        """switch -> hops to dst_switch, for the switches that reach it."""
        dist = self._distances(self.index[dst_switch])
        return {self.switches[i]: int(d) for i, d in enumerate(dist) if d >= 0}

    def distance(self, switch: str, dst_switch: str) -> int | None:
        d = int(self._distances(self.index[dst_switch])[self.index[switch]])
        return d if d >= 0 else None

    # -- next hops ------------------------------------------------------------
    def ports(self, switch: str, dst_switch: str) -> tuple[int, ...] | None:
        """The sorted ports of switch on a shortest path to dst_switch: () at dst_switch,
        None when dst_switch is unreachable from switch."""
        i, j = self.index[switch], self.index[dst_switch]
        key = (i, j)
        if key in self._ports:
            return self._ports[key]
        dist = self._distances(j)
        di = dist[i]
        if di < 0:
            out = None
        elif di == 0:
            out = ()
        else:
            out = tuple(self._nbr_port[i][dist[self._nbr[i]] == di - 1].tolist())
        self._ports[key] = out
        return out

    def toward(self, dst_switch: str) -> dict[str, tuple[int, ...]]:
        """switch -> ports toward dst_switch, for every switch that reaches it (() at dst_switch)."""
        j = self.index[dst_switch]
        dist = self._distances(j)
        return {self.switches[i]: self.ports(self.switches[i], dst_switch)
                for i in np.flatnonzero(dist >= 0).tolist()}

    def neighbor(self, switch: str, port: int) -> str:
        try:
            return self._peer[switch, port]
        except KeyError:
            raise KeyError(f"{switch} has no switch on port {port}") from None

    def compute_all(self) -> None:
        """Distances to every switch that has hosts (what an all-pairs table would need)."""
        for d in sorted({sw for sw, _ in self.attach.values()}):
            self._distances(self.index[d])

    # -- paths ----------------------------------------------------------------
    def iter_paths(self, src: str, dst: str) -> Iterator[tuple[str, ...]]:
        """Every shortest switch path from src host's switch to dst host's, in sorted order,
        generated lazily (a walk that visits next hops by name)."""
        if src not in self.attach or dst not in self.attach:
            return
        s, d = self.attach[src][0], self.attach[dst][0]
        if self.ports(s, d) is None:
            return
        stack = [(s, (s,))]
        while stack:
            node, prefix = stack.pop()
            if node == d:
                yield prefix
                continue
            nxt = sorted(self._peer[node, p] for p in self.ports(node, d))
            stack += [(n, prefix + (n,)) for n in reversed(nxt)]

    def equal_cost_paths(self, src: str, dst: str, limit: int | None = None) -> list[tuple[str, ...]]:
        """The first ``limit`` (all when None) shortest switch paths from src to dst, sorted;
        [] when dst is unreachable over OpenFlow."""
        out = []
        for p in self.iter_paths(src, dst):
            if limit is not None and len(out) >= limit:
                break
            out.append(p)
        return out

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
                memo[node] = sum(count(self._peer[node, p]) for p in self.ports(node, d))
            return memo[node]
        return count(s)
