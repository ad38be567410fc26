"""Where each flow goes: the router object the simulation asks, and what it may observe.

A router turns flows (source host, destination host, five-tuple) into paths of directed
links, all at once and vectorized: hop by hop, every flow picks one of the next hops that
lie on a shortest path to its destination switch (distances by breadth-first searches
from the destination switches, 64 at a time in the bits of a word). ``EcmpRouter`` picks by a seeded hash of the
five-tuple salted per switch, as OVS select groups hash each flow independently at every
switch; ``ShortestRouter`` picks by destination only, as the controller's ``shortest``
policy installs one next hop per (switch, destination host).

Hosts of one server talk over their NVLink switch, as the emulator's agents do (same-server
peers connect to each other's NVLink address), never over the fabric.

Policies that react to load implement ``poll`` (called every ``poll_s`` seconds of
simulated time with an ``Observation``: per-link byte counters and model rates, per-flow
bytes and rates) and return new paths for the flows they move; ``links_changed`` is called
after a fault with the same observation.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from flowsim.network import LINK_KINDS, SWITCH_NODE, Net

FABRIC_LINK = LINK_KINDS.index("fabric")
ROUTE_CHUNK = 1 << 16  # flows routed at once
_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


def fmix64(x: np.ndarray) -> np.ndarray:
    """Murmur3's 64-bit finalizer, vectorized: every input bit moves every output bit."""
    x = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= _M1
        x ^= x >> np.uint64(33)
        x *= _M2
        x ^= x >> np.uint64(33)
    return x


def five_tuple_hash(src_ip, dst_ip, sport, dport, proto=6, seed: int = 0) -> np.ndarray:
    """One 64-bit hash per flow of (src ip, dst ip, proto, sport, dport) and the seed."""
    src_ip, dst_ip = np.asarray(src_ip, np.uint64), np.asarray(dst_ip, np.uint64)
    ports = (np.asarray(sport, np.uint64) << np.uint64(16)) | np.asarray(dport, np.uint64)
    ports |= np.asarray(proto, np.uint64) << np.uint64(40)
    s = fmix64(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ np.uint64(0x9E3779B97F4A7C15))
    return fmix64(fmix64((src_ip << np.uint64(32)) | dst_ip) ^ fmix64(ports ^ s))


class SwitchPaths:
    """Shortest-path structure of the OpenFlow part of a Net, recomputed when links change."""

    def __init__(self, net: Net):
        self.net = net
        self.version = -1
        self._build()

    def _build(self):
        net = self.net
        self.sw = np.flatnonzero(net.node_kind == SWITCH_NODE)
        self.local = np.full(len(net.names), -1, dtype=np.int64)
        self.local[self.sw] = np.arange(len(self.sw))
        fab = np.flatnonzero((net.link_kind == FABRIC_LINK) & (self.local[net.link_src] >= 0)
                             & (self.local[net.link_dst] >= 0))
        self.fab_links = fab
        u, v = self.local[net.link_src[fab]], self.local[net.link_dst[fab]]
        # Next hops in the order of their port numbers (when the Net knows them), as the
        # controller sorts a switch's ports toward a destination.
        order = np.lexsort((v, net.link_port[fab], u))
        u, v, lid = u[order], v[order], fab[order]
        deg = np.bincount(u, minlength=len(self.sw))
        self.maxdeg = int(deg.max()) if len(deg) else 0
        start = np.concatenate([[0], np.cumsum(deg)[:-1]])
        pos = np.arange(len(u)) - start[u]
        self.nbr = np.full((len(self.sw), max(self.maxdeg, 1)), -1, dtype=np.int64)
        self.nbr_link = np.full_like(self.nbr, -1)
        self.nbr[u, pos] = v
        self.nbr_link[u, pos] = lid
        self._dist: dict[int, np.ndarray] = {}
        self.version = net.version

    def refresh(self):
        if self.version != self.net.version:
            self._dist = {}
            self.version = self.net.version

    def distances(self, dest_local: np.ndarray) -> tuple[np.ndarray, dict[int, int]]:
        """(matrix switches x destinations, destination -> column) of hop counts over up links."""
        self.refresh()
        need = [int(d) for d in np.unique(dest_local) if int(d) not in self._dist]
        if need:
            up = self.fab_links[self.net.link_up[self.fab_links]]
            # Cables are symmetric, so the distance from d is the distance to d.
            dm = hop_distances(len(self.sw), self.local[self.net.link_src[up]], self.local[self.net.link_dst[up]],
                               np.array(need, np.int64))
            for i, d in enumerate(need):
                self._dist[d] = dm[i]
        dests = [int(d) for d in np.unique(dest_local)]
        col = {d: i for i, d in enumerate(dests)}
        mat = np.stack([self._dist[d] for d in dests], axis=1) if dests else np.zeros((len(self.sw), 0), np.int32)
        return mat, col


def hop_distances(n: int, src: np.ndarray, dst: np.ndarray, sources: np.ndarray, block: int = 512) -> np.ndarray:
    """Hops from each of `sources` to every node over the directed edges src -> dst (-1: unreachable),
    as (len(sources), n) int32: the same as csgraph.shortest_path(unweighted, directed), by one
    breadth-first search for 64 sources at a time in the bits of a word (a 131,072-host fat-tree
    asks for 3,362 sources over 8,405 switches: one search per source took most of the run).
    Each level gathers only the edges leaving its frontier, and a block's hops are written node
    by node and turned once: indices per reached pair cost more than the search (28 M pairs there)."""
    out = np.empty((len(sources), n), np.int32)  # every block's rows are written below
    if not len(sources):
        return out
    order = np.argsort(dst, kind="stable")
    es, ed = src[order], dst[order]
    for b0 in range(0, len(sources), block):
        srcs = sources[b0:b0 + block]
        k = len(srcs)
        words = (k + 63) // 64
        reach = np.zeros((n, words), "<u8")
        i = np.arange(k)
        np.bitwise_or.at(reach, (srcs, i // 64), np.left_shift(np.uint64(1), (i % 64).astype(np.uint64)))
        lv = np.full((n, k), -1, np.int32)  # this block's hops, node-major: written a row per node
        lv[srcs, i] = 0
        frontier = reach.copy()
        active = np.zeros(n, bool)
        active[srcs] = True
        level = 0
        while True:
            level += 1
            m = active[es]  # only the edges leaving the frontier: the early levels are small
            s_, d_ = es[m], ed[m]
            if not len(s_):
                break
            starts = np.flatnonzero(np.concatenate([[True], d_[1:] != d_[:-1]]))
            heads = d_[starts]
            upd = np.bitwise_or.reduceat(frontier[s_], starts, axis=0) & ~reach[heads]
            keep = upd.any(axis=1)
            heads, upd = heads[keep], upd[keep]
            if not len(heads):
                break
            reach[heads] |= upd
            bits = np.unpackbits(upd.view(np.uint8), axis=1, bitorder="little")[:, :k]
            lv[heads] = np.where(bits.view(bool), np.int32(level), lv[heads])
            frontier[active] = 0
            frontier[heads] = upd
            active[:] = False
            active[heads] = True
        out[b0:b0 + k] = lv.T
    return out


class Router:
    """Base router: paths for flows, hop by hop over shortest paths. Subclasses choose the hop."""

    name = "router"
    poll_s: float | None = None
    # A path may be several equal-cost paths one after another, the flow split evenly over them
    # (SprayRouter): the engine then weighs each link by path_weights.
    splits = False

    def __init__(self):
        self._paths: SwitchPaths | None = None
        self.sim = None

    def attach(self, sim) -> None:
        """The simulation this router serves (its clock ``sim.now``, ``sim.five_tuple(c)``)."""
        self.sim = sim

    def describe(self) -> dict:
        return {"name": self.name}

    def hop_choice(self, key: np.ndarray, dst_host: np.ndarray, switch: np.ndarray) -> np.ndarray:
        """A 64-bit number per flow at this hop; the next hop is it modulo the choices."""
        raise NotImplementedError

    def structure(self, net: Net) -> SwitchPaths:
        if self._paths is None or self._paths.net is not net:
            self._paths = SwitchPaths(net)
        return self._paths

    def route(self, net: Net, src: np.ndarray, dst: np.ndarray, key: np.ndarray,
              conns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Paths of flows src[i] -> dst[i] (host positions) as CSR (indptr, link ids).
        An unreachable flow (or one to itself) gets an empty path. conns: the simulation's
        connection ids of the flows, for routers that place them one by one."""
        src, dst, key = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(key, np.uint64)
        if len(src) > ROUTE_CHUNK:  # each hop holds a flows x max-degree array: bound it
            parts = [self._route(net, src[i:i + ROUTE_CHUNK], dst[i:i + ROUTE_CHUNK], key[i:i + ROUTE_CHUNK])
                     for i in range(0, len(src), ROUTE_CHUNK)]
            lens = np.concatenate([np.diff(ip) for ip, _ in parts])
            return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64), np.concatenate([lk for _, lk in parts])
        return self._route(net, src, dst, key)

    def _route(self, net: Net, src: np.ndarray, dst: np.ndarray, key: np.ndarray):
        n = len(src)
        cols: list[np.ndarray] = []  # one column per hop position; -1 where a flow has no hop there
        ok = src != dst
        hs, hd = net.hosts[src], net.hosts[dst]
        nvl_s, nvl_d = net.host_nvl[src], net.host_nvl[dst]
        local = ok & (nvl_s >= 0) & (nvl_s == nvl_d)
        fabric = ok & ~local
        if local.any():
            for a, b in ((hs, nvl_s), (nvl_d, hd)):
                c = np.full(n, -1, np.int64)
                c[local] = _links(net, a[local], b[local])
                cols.append(c)
        if fabric.any():
            cols += self._fabric_hops(net, src, dst, key, fabric)
        mat = np.stack(cols, axis=1) if cols else np.zeros((n, 0), np.int64)
        present = mat >= 0
        # A flow is routed when every hop it needs exists and is up.
        ok &= ~(local & (present.sum(axis=1) < 2))
        ok &= ~(fabric & ~present.any(axis=1))
        ok &= np.where(present, net.link_up[np.maximum(mat, 0)], True).all(axis=1)
        mat[~ok] = -1
        keep = mat >= 0
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        return indptr, mat[keep]

    def _fabric_hops(self, net, src, dst, key, fabric) -> list[np.ndarray]:
        """Columns host->switch, switch hops..., switch->host for the flows in `fabric`;
        a flow that cannot get through has -1 everywhere."""
        n = len(src)
        sp_ = self.structure(net)
        s_sw, d_sw = net.host_switch[src], net.host_switch[dst]
        go = fabric & (s_sw >= 0) & (d_sw >= 0)
        up, down = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        up[go] = _links(net, net.hosts[src[go]], s_sw[go])
        down[go] = _links(net, d_sw[go], net.hosts[dst[go]])
        cur = np.full(n, -1, np.int64)
        dl = np.full(n, -1, np.int64)
        cur[go], dl[go] = sp_.local[s_sw[go]], sp_.local[d_sw[go]]
        go &= (cur >= 0) & (dl >= 0)
        mid: list[np.ndarray] = []
        if go.any():
            dist, col = sp_.distances(dl[go])
            cidx = np.full(n, -1, np.int64)
            lut = np.full(int(dl[go].max()) + 1, -1, np.int64)
            for d, c in col.items():
                lut[d] = c
            cidx[go] = lut[dl[go]]
            g = np.flatnonzero(go)
            go[g[dist[cur[g], cidx[g]] < 0]] = False
            walking = go & (cur != dl)
            while walking.any():
                w = np.flatnonzero(walking)
                nb, nl = sp_.nbr[cur[w]], sp_.nbr_link[cur[w]]
                here = dist[cur[w], cidx[w]]
                nd = np.where(nb >= 0, dist[np.maximum(nb, 0), cidx[w][:, None]], -2)
                valid = (nb >= 0) & net.link_up[np.maximum(nl, 0)] & (nd >= 0) & (nd == here[:, None] - 1)
                count = valid.sum(axis=1)
                stuck = count == 0
                pick = self.hop_choice(key[w], dst[w], sp_.sw[cur[w]]) % np.maximum(count, 1).astype(np.uint64)
                rank = np.cumsum(valid, axis=1) - 1
                chosen = np.argmax(valid & (rank == pick.astype(np.int64)[:, None]), axis=1)
                rows = np.arange(len(w))
                step = np.full(n, -1, np.int64)
                step[w] = np.where(stuck, -1, nl[rows, chosen])
                cur[w] = np.where(stuck, cur[w], nb[rows, chosen])
                go[w[stuck]] = False
                mid.append(step)
                walking = go & (cur != dl)
        hops = [up] + mid + [down]
        for h in hops:
            h[~go] = -1
        return hops

    # -- hooks for policies ------------------------------------------------------
    def timers(self) -> list[float]:
        """Times at which the policy wants ``wake`` called (a controller coming back, say)."""
        return []

    def wake(self, now_s: float, obs: "Observation") -> dict[int, np.ndarray]:
        """New paths at one of ``timers()``; none by default."""
        return {}

    def poll(self, now_s: float, obs: "Observation") -> dict[int, np.ndarray]:
        """New paths (connection id -> link ids) for the flows the policy moves; none by default."""
        return {}

    def links_changed(self, now_s: float, obs: "Observation") -> dict[int, np.ndarray]:
        """After a fault: recompute every live connection's path, as the controller reinstalls
        its routes (select groups rehash over the new bucket sets)."""
        if not len(obs.conn_ids):
            return {}
        indptr, links = self.route(obs.net, obs.conn_src, obs.conn_dst, obs.conn_key)
        return {int(c): links[indptr[i]:indptr[i + 1]] for i, c in enumerate(obs.conn_ids)}

    def equal_cost_paths(self, net: Net, src: int, dst: int, limit: int = 256) -> list[np.ndarray]:
        """Every shortest path (as link ids) between two hosts, up to `limit`, in a stable order."""
        if net.host_nvl[src] >= 0 and net.host_nvl[src] == net.host_nvl[dst]:
            ind, lk = self.route(net, [src], [dst], [0])
            return [lk]
        s_sw, d_sw = int(net.host_switch[src]), int(net.host_switch[dst])
        first, last = net.link(int(net.hosts[src]), s_sw), net.link(d_sw, int(net.hosts[dst]))
        return [np.array([first, *mid, last], dtype=np.int64) for mid in self.switch_paths(net, s_sw, d_sw, limit)]

    def switch_paths(self, net: Net, s_sw: int, d_sw: int, limit: int = 256) -> list[list[int]]:
        """Every shortest path (as switch-to-switch link ids, [] within one switch) between two
        OpenFlow switches over links that are up, up to `limit`, in port order."""
        sp_ = self.structure(net)
        dl = int(sp_.local[d_sw])
        dist, col = sp_.distances(np.array([dl]))
        d = dist[:, col[dl]]
        out: list[list[int]] = []

        def walk(u, prefix):
            if len(out) >= limit:
                return
            if u == dl:
                out.append(prefix)
                return
            for v, lid in zip(sp_.nbr[u], sp_.nbr_link[u]):
                if v >= 0 and net.link_up[lid] and d[v] == d[u] - 1:
                    walk(v, prefix + [int(lid)])

        if d[sp_.local[s_sw]] >= 0:
            walk(int(sp_.local[s_sw]), [])
        return out


class EcmpRouter(Router):
    """ECMP: a seeded hash of the five-tuple, salted per switch, over the equal-cost next hops.
    The seed stands for the hashing luck of one emulator run (its ephemeral ports)."""

    name = "ecmp"

    def __init__(self, seed: int = 0):
        super().__init__()
        self.seed = int(seed)

    def describe(self) -> dict:
        return {"name": self.name, "seed": self.seed, "hash": "murmur3 fmix64 of the five-tuple, salted per switch"}

    def hop_choice(self, key, dst_host, switch):
        salt = fmix64(np.asarray(switch, np.uint64) ^ np.uint64(self.seed * 0x100000001B3 & 0xFFFFFFFFFFFFFFFF))
        return fmix64(key ^ salt)


class ShortestRouter(Router):
    """One path per (switch, destination host), as the controller's ``shortest`` policy: of the
    switch's ports toward the destination, in port order, the one at crc32("dpid:rank") modulo
    their count (controller.routing.switch_routes). A Net without datapath ids (Net.fat_tree)
    hashes the node index and host position instead."""

    name = "shortest"

    def __init__(self):
        super().__init__()
        self._crc: dict[tuple[int, int], int] = {}

    def hop_choice(self, key, dst_host, switch):
        net = self._paths.net
        dpid = net.node_dpid[np.asarray(switch, np.int64)]
        rank = net.host_rank[np.asarray(dst_host, np.int64)]
        if (dpid < 0).any():
            return fmix64((np.asarray(switch, np.uint64) << np.uint64(32)) ^ np.asarray(dst_host, np.uint64))
        out = np.empty(len(dpid), np.uint64)
        crc = self._crc
        for k, pair in enumerate(zip(dpid.tolist(), rank.tolist())):
            v = crc.get(pair)
            if v is None:
                v = crc[pair] = zlib.crc32(f"{pair[0]}:{pair[1]}".encode())
            out[k] = v
        return out


class SprayRouter(Router):
    """Per-packet spraying (the ``spray`` policy), as fluid: each flow splits evenly over its
    equal-cost paths. Its path is those paths one after another (each starts on the source's
    host link), so a link on j of the k paths carries j/k of the flow (path_weights)."""

    name = "spray"
    splits = True
    MAX_PATHS = 256  # per host pair; beyond, the first 256 in port order (stated in describe)

    def __init__(self):
        super().__init__()
        self._mids: dict = {}  # (source switch, destination switch) -> (paths x hops) link ids
        self._version = None

    def describe(self) -> dict:
        return {"name": self.name, "split": f"even over the equal-cost paths (at most {self.MAX_PATHS} a pair)"}

    def _middle(self, net, s_sw: int, d_sw: int) -> np.ndarray:
        m = self._mids.get((s_sw, d_sw))
        if m is None:
            paths = self.switch_paths(net, s_sw, d_sw, self.MAX_PATHS)
            m = self._mids[s_sw, d_sw] = (np.array(paths, np.int64).reshape(len(paths), -1) if paths
                                          else np.zeros((0, 0), np.int64))  # unreachable
        return m

    def route(self, net, src, dst, key, conns=None):
        """Vectorized per switch pair: the flows between two switches share their middle paths."""
        if self._version != net.version:
            self._mids, self._version = {}, net.version
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        n = len(src)
        ok = src != dst
        local = ok & (net.host_nvl[src] >= 0) & (net.host_nvl[src] == net.host_nvl[dst])
        s_sw, d_sw = net.host_switch[src], net.host_switch[dst]
        fab = ok & ~local & (s_sw >= 0) & (d_sw >= 0)
        first, last = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        a, b = np.where(local, net.host_nvl[src], s_sw), np.where(local, net.host_nvl[dst], d_sw)
        go = local | fab
        first[go] = _links(net, net.hosts[src[go]], a[go])
        last[go] = _links(net, b[go], net.hosts[dst[go]])
        go &= (first >= 0) & (last >= 0)
        go &= net.link_up[np.maximum(first, 0)] & net.link_up[np.maximum(last, 0)]
        # Groups of flows with the same middle: NVLink peers (none), then each switch pair.
        group = np.where(local, -1, s_sw * len(net.names) + d_sw)
        keys, inv = np.unique(np.where(go, group, -2), return_inverse=True)
        mids, lens = [], np.zeros(n, np.int64)
        for g, k in enumerate(keys.tolist()):
            m = None if k == -2 else np.zeros((1, 0), np.int64) if k == -1 else \
                self._middle(net, int(k // len(net.names)), int(k % len(net.names)))
            mids.append(m)
            if m is not None and len(m):
                lens[inv == g] = m.size + 2 * len(m)
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        out = np.empty(int(indptr[-1]), np.int64)
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(keys) + 1))
        for g, m in enumerate(mids):
            if m is None or not len(m):
                continue
            idx = order[bounds[g]:bounds[g + 1]]
            block = np.empty((len(idx), len(m), m.shape[1] + 2), np.int64)
            block[:, :, 0], block[:, :, 1:-1], block[:, :, -1] = first[idx, None], m[None], last[idx, None]
            out[indptr[idx][:, None] + np.arange(block[0].size)] = block.reshape(len(idx), -1)
        return indptr, out


def path_weights(path: np.ndarray) -> np.ndarray:
    """Each entry's share of the flow: 1/k for a path made of k equal-cost paths (k: how often
    its first link, the source's host link, appears), so link loads and hop counts divide by k."""
    path = np.asarray(path)
    if not len(path):
        return np.zeros(0)
    return np.full(len(path), 1.0 / np.count_nonzero(path == path[0]))


def _links(net: Net, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Link ids of the directed links a[i] -> b[i] (vectorized lookup through a sorted key)."""
    keys = net.link_src * len(net.names) + net.link_dst
    order = np.argsort(keys, kind="stable")
    want = np.asarray(a, np.int64) * len(net.names) + np.asarray(b, np.int64)
    pos = np.searchsorted(keys[order], want)
    pos = np.minimum(pos, len(order) - 1)
    found = keys[order][pos] == want
    return np.where(found, order[pos], -1)


@dataclass
class Observation:
    """What a policy sees at a poll, in the model's own terms (real-cluster units).

    link_bytes: cumulative bytes carried per directed link (what port counters count);
    link_rate_Bps: the model's current rate per link; conn_*: the live connections (flows):
    id, source and destination host positions, five-tuple hash key, cumulative bytes,
    current rate, and path (link ids)."""

    now_s: float
    net: Net
    link_bytes: np.ndarray
    link_rate_Bps: np.ndarray
    conn_ids: np.ndarray
    conn_src: np.ndarray
    conn_dst: np.ndarray
    conn_key: np.ndarray
    conn_bytes: np.ndarray
    conn_rate_Bps: np.ndarray
    conn_paths: list

    def load_gbps(self, a: str, b: str) -> float:
        return float(self.link_rate_Bps[self.net.link(a, b)] * 8 / 1e9)
