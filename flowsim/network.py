"""The fabric as arrays: directed links with capacities, hosts, NVLink domains.

``Net.from_fabric`` reads a ``topologies.Fabric``; every cable becomes two directed links
(full duplex), each with the cable's rate. ``Net.fat_tree`` builds the same k-ary fat-tree
straight into arrays, for sizes the networkx builders do not reach yet (names and
wiring as ``topologies.builders.fat_tree``, which a test checks).
"""
from __future__ import annotations

import numpy as np

from topologies.fabric import HOST, Fabric

HOST_NODE, SWITCH_NODE, NVLINK_NODE = 0, 1, 2
LINK_KINDS = ("host", "fabric", "nvlink")
# Bytes a TCP segment carries besides its payload: IPv4 20, TCP 20, the timestamp option 12
# (the packet engine's segments are MTU - 52 bytes, as Linux's with timestamps).
TCPIP_HEADER_BYTES = 52
# Bytes the link adds to each IP packet, by flow.headers: ppp as the packet engine's ns-3
# point-to-point links; ethernet as a real NIC (header 14, FCS 4, preamble 8, inter-frame gap 12).
FRAMING_BYTES = {"ppp": 2, "ethernet": 38}


def goodput_fraction(headers: str, mtu_bytes: int) -> float:
    """Payload over wire bytes of a full segment: (MTU - 52) / (MTU + framing); 1 for headers none.
    ACKs (54 to 90 bytes per two segments, on the reverse direction) are not counted."""
    if headers == "none":
        return 1.0
    if headers not in FRAMING_BYTES:
        raise ValueError(f"headers: expected none or one of {', '.join(FRAMING_BYTES)}, found {headers!r}")
    if not mtu_bytes > TCPIP_HEADER_BYTES:
        raise ValueError(f"mtu_bytes: expected > {TCPIP_HEADER_BYTES}, found {mtu_bytes!r}")
    return (mtu_bytes - TCPIP_HEADER_BYTES) / (mtu_bytes + FRAMING_BYTES[headers])


def _ip_int(ip: str) -> int:
    a, b, c, d = (int(x) for x in ip.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


class Net:
    """Directed links (src node, dst node, bytes/s, kind, up) and where each host plugs in.

    Capacities are in bytes per second (``link_gbps`` x 1e9 / 8); names say the unit.
    """

    def __init__(self, names: list[str], node_kind: np.ndarray, link_src: np.ndarray, link_dst: np.ndarray,
                 link_gbps: np.ndarray, link_kind: np.ndarray, hosts: np.ndarray, host_ip: np.ndarray,
                 host_switch: np.ndarray, host_nvl: np.ndarray, kind: str = "custom", params: dict | None = None):
        self.names = names
        self.node_kind = np.asarray(node_kind, dtype=np.int8)
        self.link_src = np.asarray(link_src, dtype=np.int64)
        self.link_dst = np.asarray(link_dst, dtype=np.int64)
        self.link_gbps = np.asarray(link_gbps, dtype=float)
        self.link_kind = np.asarray(link_kind, dtype=np.int8)
        self.link_up = np.ones(len(self.link_src), dtype=bool)
        self.hosts = np.asarray(hosts, dtype=np.int64)          # node index of rank-order host i
        self.host_ip = np.asarray(host_ip, dtype=np.uint32)
        self.host_switch = np.asarray(host_switch, dtype=np.int64)  # fabric switch (node index) or -1
        self.host_nvl = np.asarray(host_nvl, dtype=np.int64)        # NVLink switch (node index) or -1
        self.kind, self.params = kind, dict(params or {})
        self.goodput = 1.0  # payload share of every link's rate (set_goodput)
        self.version = 0  # bumped on every link state change, so routers can drop caches
        # What the controller sees, when the Net comes from a Fabric: each directed link's port
        # number at its source node, each node's datapath id, each host's rank in the fabric
        # (-1 where unknown). ShortestRouter picks next hops with them as the controller does.
        self.link_port = np.full(len(self.link_src), -1, np.int64)
        self.node_dpid = np.full(len(names), -1, np.int64)
        self.host_rank = np.arange(len(self.hosts), dtype=np.int64)
        # NIC rate of each host (the link of its first fabric port; NVLink excluded), bytes/s
        pos = np.full(len(names), -1, np.int64)
        pos[self.hosts] = np.arange(len(self.hosts))
        src_pos = pos[self.link_src]
        eth0 = np.where(src_pos >= 0, self.host_switch[np.maximum(src_pos, 0)], -1)
        host_links = np.flatnonzero((self.link_kind == LINK_KINDS.index("host")) & (self.link_dst == eth0))
        nic = np.zeros(len(names))
        nic[self.link_src[host_links]] = self.link_gbps[host_links] * (1e9 / 8)
        self.host_nic = nic[self.hosts]
        self._index: dict[str, int] | None = None
        self._link_of: dict[tuple[int, int], int] | None = None
        self._host_of_node: dict[int, int] | None = None

    # -- sizes and lookups ----------------------------------------------------
    @property
    def n_links(self) -> int:
        return len(self.link_src)

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)

    @property
    def capacity_Bps(self) -> np.ndarray:
        """Per directed link, bytes/s; 0 while the link is down (read-only: kept until links change)."""
        cached = getattr(self, "_cap", None)
        if cached is None or cached[0] != self.version:
            cap = np.where(self.link_up, self.link_gbps * (1e9 / 8 * self.goodput), 0.0)
            cap.setflags(write=False)
            self._cap = cached = (self.version, cap)
        return cached[1]

    def index(self, name: str) -> int:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.names)}
        return self._index[name]

    def host_index(self, name: str) -> int:
        """Rank-order position of a host."""
        if self._host_of_node is None:
            self._host_of_node = {int(n): i for i, n in enumerate(self.hosts)}
        return self._host_of_node[self.index(name)]

    def link(self, a: str | int, b: str | int) -> int:
        """The directed link a -> b."""
        if self._link_of is None:
            self._link_of = {(int(s), int(d)): i for i, (s, d) in enumerate(zip(self.link_src, self.link_dst))}
        ia = a if isinstance(a, (int, np.integer)) else self.index(a)
        ib = b if isinstance(b, (int, np.integer)) else self.index(b)
        return self._link_of[int(ia), int(ib)]

    def host_nic_Bps(self, h: int) -> float:
        """NIC rate of host position h, bytes/s of payload."""
        return float(self.host_nic[h]) * self.goodput

    def store_forward_s_per_byte(self, path) -> float:
        """A packet's serialization, seconds per byte, summed over a path's links after the first
        (each switch receives a whole packet before it sends it on); a path made of k equal-cost
        paths (spraying: k copies of the host link) counts each 1/k."""
        path = np.asarray(path, np.int64)
        if len(path) < 2:
            return 0.0
        line_Bps = self.link_gbps[path] * (1e9 / 8)
        share = 1.0 / np.count_nonzero(path == path[0])
        return float((share / line_Bps).sum() - 1.0 / line_Bps[0])

    def set_goodput(self, fraction: float) -> None:
        """Every link carries payload at this fraction of its rate (headers and framing take the
        rest: goodput_fraction); link_gbps stays the line rate, which links.csv reports."""
        if not 0 < fraction <= 1:
            raise ValueError(f"goodput fraction: expected in (0, 1], found {fraction!r}")
        self.goodput = float(fraction)
        self.version += 1

    def link_name(self, i: int) -> tuple[str, str]:
        return self.names[self.link_src[i]], self.names[self.link_dst[i]]

    def node_path(self, links) -> list[str]:
        links = list(links)
        if not links:
            return []
        return [self.names[self.link_src[links[0]]]] + [self.names[self.link_dst[i]] for i in links]

    # -- faults ---------------------------------------------------------------
    def set_cable(self, a: str, b: str, up: bool) -> list[int]:
        """Both directions of the cable a-b up or down; returns their link ids."""
        ids = [self.link(a, b), self.link(b, a)]
        self.link_up[ids] = up
        self.version += 1
        return ids

    def set_switch(self, name: str, up: bool) -> list[int]:
        """Every link into or out of a switch up or down."""
        i = self.index(name)
        ids = np.flatnonzero((self.link_src == i) | (self.link_dst == i)).tolist()
        self.link_up[ids] = up
        self.version += 1
        return ids

    # -- builders -------------------------------------------------------------
    @classmethod
    def from_fabric(cls, fabric: Fabric) -> "Net":
        g = fabric.graph
        hosts = fabric.hosts
        names = hosts + [n for n in fabric.switches]
        idx = {n: i for i, n in enumerate(names)}
        kind = np.array([HOST_NODE] * len(hosts) + [SWITCH_NODE if g.nodes[s].get("openflow", True) else NVLINK_NODE
                                                    for s in fabric.switches], dtype=np.int8)
        kcode = {k: i for i, k in enumerate(LINK_KINDS)}
        links = fabric.links()
        # Each cable is two links, a -> b then b -> a: columns per cable, interleaved once.
        ia = np.fromiter((idx[a] for a, _, _ in links), np.int64, len(links))
        ib = np.fromiter((idx[b] for _, b, _ in links), np.int64, len(links))
        gb = np.fromiter((d["link_gbps"] for _, _, d in links), np.float64, len(links))
        kc = np.fromiter((kcode[d["kind"]] for _, _, d in links), np.int64, len(links))
        pa = np.fromiter(((d.get("ports") or {}).get(a, -1) for a, _, d in links), np.int64, len(links))
        pb = np.fromiter(((d.get("ports") or {}).get(b, -1) for _, b, d in links), np.int64, len(links))
        src, dst = np.stack([ia, ib], axis=1).ravel(), np.stack([ib, ia], axis=1).ravel()
        gbps, lk, ports = np.repeat(gb, 2), np.repeat(kc, 2), np.stack([pa, pb], axis=1).ravel()
        host_switch = np.full(len(hosts), -1, dtype=np.int64)
        host_nvl = np.full(len(hosts), -1, dtype=np.int64)
        for i, h in enumerate(hosts):
            first = None  # a dual-homed host's flows leave by eth0, as the controller routes them
            for nbr in g.neighbors(h):
                e = g.edges[h, nbr]
                if e["kind"] == "host" and (first is None or e["ports"][h] < first):
                    first, host_switch[i] = e["ports"][h], idx[nbr]
                elif e["kind"] == "nvlink":
                    host_nvl[i] = idx[nbr]
        ips = np.array([_ip_int(g.nodes[h]["ip"]) for h in hosts], dtype=np.uint32)
        assert all(g.nodes[h]["role"] == HOST for h in hosts)
        net = cls(names, kind, src, dst, gbps, lk,
                  np.arange(len(hosts)), ips, host_switch, host_nvl, fabric.kind, fabric.params)
        net.link_port = ports
        net.node_dpid = np.array([g.nodes[n].get("dpid", -1) if g.nodes[n].get("dpid") is not None else -1
                                  for n in names], np.int64)
        net.host_rank = np.array([g.nodes[h].get("rank", i) for i, h in enumerate(hosts)], np.int64)
        return net

    @classmethod
    def fat_tree(cls, k: int, link_gbps: float = 400.0, oversubscription: float = 1.0) -> "Net":
        """Al-Fares k-ary fat-tree, named and wired like topologies.builders.fat_tree, in arrays."""
        if k < 2 or k % 2:
            raise ValueError(f"fat-tree k: expected an even integer >= 2, found {k!r}")
        half = k // 2
        n_hosts, n_core, n_pod_sw = k * half * half, half * half, k * half
        hosts = np.arange(n_hosts)
        core0 = n_hosts
        agg0 = core0 + n_core
        edge0 = agg0 + n_pod_sw
        names = [f"h{h}" for h in range(n_hosts)] + [f"core{i}" for i in range(n_core)]
        names += [f"agg{p}_{i}" for p in range(k) for i in range(half)]
        names += [f"edge{p}_{i}" for p in range(k) for i in range(half)]
        kind = np.concatenate([np.zeros(n_hosts), np.ones(n_core + 2 * n_pod_sw)]).astype(np.int8)
        host_edge = edge0 + hosts // half                     # edge switch p*half + i
        pods = np.repeat(np.arange(k), half)                  # pod of each pod-switch slot
        slot = np.tile(np.arange(half), k)
        # edge (p, i) -- agg (p, j) for every j
        ea_e = np.repeat(edge0 + np.arange(n_pod_sw), half)
        ea_a = agg0 + np.repeat(pods, half) * half + np.tile(np.arange(half), n_pod_sw)
        # agg (p, i) -- core i*half + j
        ac_a = np.repeat(agg0 + np.arange(n_pod_sw), half)
        ac_c = core0 + np.repeat(slot, half) * half + np.tile(np.arange(half), n_pod_sw)
        up_gbps = link_gbps / oversubscription
        a = np.concatenate([hosts, ea_e, ac_a])
        b = np.concatenate([host_edge, ea_a, ac_c])
        gb = np.concatenate([np.full(n_hosts, link_gbps), np.full(len(ea_e) + len(ac_a), up_gbps)])
        lk = np.concatenate([np.zeros(n_hosts), np.ones(len(ea_e) + len(ac_a))]).astype(np.int8)
        src = np.concatenate([a, b])
        dst = np.concatenate([b, a])
        ips = (10 << 24) | (((hosts + 1) >> 8) << 8) | ((hosts + 1) & 0xFF)
        return cls(names, kind, src, dst, np.concatenate([gb, gb]), np.concatenate([lk, lk]), hosts,
                   ips.astype(np.uint32), host_edge, np.full(n_hosts, -1), "fat-tree",
                   {"k": k, "oversubscription": oversubscription})
