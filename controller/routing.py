"""Destination-based routes for every host IP on every OpenFlow switch.

Pure code over the ``Fabric`` graph. ``shortest`` gives every destination
one next hop per switch (so one path per host pair); ``ecmp`` gives a select
group over every next hop that lies on a shortest path. Only the
OpenFlow-steered part of the fabric is used: hosts of rail-optimized fabrics
reach each other through rails and spines here, never through NVLink bridges.
"""
from __future__ import annotations

import zlib
from collections import deque

from badinput import InputError
from controller.rules import (COOKIE_ARP, COOKIE_DETECT, COOKIE_MISS, COOKIE_ROUTE, ETH_ARP, ETH_IPV4,
                              IPPROTO_TCP, PRIORITY_ARP, PRIORITY_DETECT, PRIORITY_MISS, PRIORITY_ROUTE,
                              FlowRule, GroupRule)
from topologies.fabric import Fabric

# Every policy routes on top of one base table; the congestion-aware ones add
# per-flow rules above ECMP.
POLICIES = {"shortest": "shortest", "ecmp": "ecmp", "congestion-aware": "ecmp", "coschedule": "ecmp"}
DEFAULT_POLICY = "ecmp"  # what a run gets when its experiment names no routing
# Where destination routes live. The congestion-aware policies keep table 0
# for per-flow placements and send unplaced host TCP to the controller there.
ROUTE_TABLE = {"shortest": 0, "ecmp": 0, "congestion-aware": 1, "coschedule": 1}


def check_policy(policy: str) -> str:
    """Return the base forwarding ('shortest' or 'ecmp') of a routing policy."""
    if policy not in POLICIES:
        raise InputError("controller.routing", "one of " + ", ".join(POLICIES), policy)
    return POLICIES[policy]


class NextHops:
    """For each destination switch and each switch: the sorted ports that lie on a shortest path.

    Computed once per destination switch by BFS over the switch graph, so the
    cost is (#destination switches x #links), not per host pair.
    """

    def __init__(self, fabric: Fabric, down: frozenset = frozenset()):
        """``down``: links (frozenset of two node names) to route around."""
        self.fabric = fabric
        self.down = frozenset(down)
        self.switches = fabric.openflow_switches
        of = set(self.switches)
        self._adj: dict[str, list[tuple[str, int]]] = {s: [] for s in self.switches}
        self._peer: dict[tuple[str, int], str] = {}
        for a, b, d in fabric.graph.edges(data=True):
            if a in of and b in of and frozenset((a, b)) not in self.down:
                self._adj[a].append((b, d["ports"][a]))
                self._adj[b].append((a, d["ports"][b]))
                self._peer[a, d["ports"][a]] = b
                self._peer[b, d["ports"][b]] = a
        self.attach: dict[str, tuple[str, int]] = {}
        for h in fabric.hosts:
            sw, port = fabric.attachment(h)
            if sw in of and frozenset((h, sw)) not in self.down:
                self.attach[h] = (sw, port)
        self._to: dict[str, dict[str, tuple[int, ...]]] = {}
        self._dist: dict[str, dict[str, int]] = {}

    def distances(self, dst_switch: str) -> dict[str, int]:
        if dst_switch not in self._dist:
            dist = {dst_switch: 0}
            q = deque([dst_switch])
            while q:
                u = q.popleft()
                du = dist[u] + 1
                for v, _ in self._adj[u]:
                    if v not in dist:
                        dist[v] = du
                        q.append(v)
            self._dist[dst_switch] = dist
        return self._dist[dst_switch]

    def toward(self, dst_switch: str) -> dict[str, tuple[int, ...]]:
        """switch -> ports toward dst_switch (absent when unreachable, () at dst_switch)."""
        if dst_switch not in self._to:
            dist = self.distances(dst_switch)
            out = {}
            for s, ds in dist.items():
                out[s] = tuple(sorted(p for n, p in self._adj[s] if dist.get(n, -2) == ds - 1))
            self._to[dst_switch] = out
        return self._to[dst_switch]

    def ports(self, switch: str, dst_switch: str) -> tuple[int, ...] | None:
        return self.toward(dst_switch).get(switch)

    def neighbor(self, switch: str, port: int) -> str:
        try:
            return self._peer[switch, port]
        except KeyError:
            raise KeyError(f"{switch} has no switch on port {port}") from None

    def compute_all(self) -> None:
        for d in sorted({sw for sw, _ in self.attach.values()}):
            self.toward(d)


def _mix(a: int, b: int) -> int:
    """A stable hash (Python's str hash is salted per process)."""
    return zlib.crc32(f"{a}:{b}".encode())


def base_rules(switch: str, route_table: int = 0, host_ports: tuple[int, ...] = ()) -> list[FlowRule]:
    """ARP to the controller (it answers from the host table; no flooding on a
    fabric with loops) and an explicit drop on table miss. With a separate
    route table, table 0 also copies hosts' unplaced TCP to the controller."""
    rules = [FlowRule(switch, PRIORITY_ARP, {"eth_type": ETH_ARP}, (("controller",),), cookie=COOKIE_ARP)]
    if route_table:
        rules += [FlowRule(switch, PRIORITY_DETECT, {"in_port": p, "eth_type": ETH_IPV4, "ip_proto": IPPROTO_TCP},
                           (("controller",),), cookie=COOKIE_DETECT, goto_table=route_table)
                  for p in host_ports]
        rules.append(FlowRule(switch, PRIORITY_MISS, {}, (), cookie=COOKIE_MISS, goto_table=route_table))
    rules.append(FlowRule(switch, PRIORITY_MISS, {}, (), cookie=COOKIE_MISS, table=route_table))
    return rules


def switch_routes(fabric: Fabric, switch: str, policy: str = DEFAULT_POLICY, next_hops: NextHops | None = None,
                  group_ids: dict | None = None) -> tuple[list[FlowRule], list[GroupRule]]:
    """The flow entries and groups of one switch (what the adapter installs on connect).

    ``group_ids`` (port set -> group id) keeps ids stable across recomputations;
    new port sets get fresh ids, in sorted order.
    """
    base = check_policy(policy)
    table = ROUTE_TABLE[policy]
    nh = next_hops or NextHops(fabric)
    node = fabric.node(switch)
    if node.get("role") != "switch" or not node.get("openflow", True):
        raise KeyError(f"{switch} is not an OpenFlow switch")
    dpid = node["dpid"]
    host_ports = tuple(sorted(p for sw, p in nh.attach.values() if sw == switch))
    flows = base_rules(switch, table, host_ports)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    for h in fabric.hosts:
        if h not in nh.attach:
            continue
        dsw, hport = nh.attach[h]
        if dsw == switch:
            chosen.append((h, (hport,)))
            continue
        ports = nh.ports(switch, dsw)
        if not ports:
            continue  # unreachable over OpenFlow: table miss drops it
        if base == "shortest" and len(ports) > 1:
            ports = (ports[_mix(dpid, fabric.node(h)["rank"]) % len(ports)],)
        chosen.append((h, ports))
    # One group per distinct port set, numbered in sorted order: deterministic
    # and small (a fat-tree edge switch needs one group for all its uplinks).
    gids = group_ids if group_ids is not None else {}
    needed = sorted({ps for _, ps in chosen if len(ps) > 1})
    for ps in needed:
        if ps not in gids:
            gids[ps] = max(gids.values(), default=0) + 1
    groups = sorted((GroupRule(switch, gids[ps], "select", tuple((1, (("output", p),)) for p in ps))
                     for ps in needed), key=lambda g: g.group_id)
    for h, ps in chosen:
        act = (("group", gids[ps]),) if len(ps) > 1 else (("output", ps[0]),)
        flows.append(FlowRule(switch, PRIORITY_ROUTE, {"eth_type": ETH_IPV4, "ipv4_dst": fabric.node(h)["ip"]},
                              act, cookie=COOKIE_ROUTE, table=table))
    return flows, groups


def compute_routes(fabric: Fabric, policy: str = DEFAULT_POLICY) -> tuple[list[FlowRule], list[GroupRule]]:
    """Flow entries and groups for every OpenFlow switch, in dpid order."""
    check_policy(policy)
    nh = NextHops(fabric)
    flows: list[FlowRule] = []
    groups: list[GroupRule] = []
    for sw in fabric.openflow_switches:
        f, g = switch_routes(fabric, sw, policy, nh)
        flows += f
        groups += g
    return flows, groups


def equal_cost_paths(fabric: Fabric, src: str, dst: str, next_hops: NextHops | None = None,
                     limit: int | None = None) -> list[tuple[str, ...]]:
    """Every shortest switch path from src host's switch to dst host's switch, sorted.

    Paths are tuples of switch names; [] when dst is unreachable over OpenFlow.
    """
    nh = next_hops or NextHops(fabric)
    if src not in nh.attach or dst not in nh.attach:
        return []
    s, d = nh.attach[src][0], nh.attach[dst][0]
    toward = nh.toward(d)
    if s not in toward:
        return []
    paths: list[tuple[str, ...]] = []

    def walk(node: str, prefix: tuple[str, ...]) -> None:
        if limit is not None and len(paths) >= limit:
            return
        if node == d:
            paths.append(prefix)
            return
        for p in toward[node]:
            n = nh.neighbor(node, p)
            walk(n, prefix + (n,))

    walk(s, (s,))
    return sorted(paths)
