"""Base forwarding compiled to OpenFlow: destination routes for every host IP on every switch.

A policy's ``Forwarding`` says, per switch and destination host, which ports a
packet may leave by; here that becomes one flow entry per destination and
one select group per distinct port set (ECMP). The fake network and the Ryu
adapter read the same entries.
"""
from __future__ import annotations

from controller.load import LinkLoad
from controller.paths import ShortestPaths, path_links  # noqa: F401  (path_links: the old home)
from controller.policy import Forwarding, Observation
from controller.registry import DEFAULT_POLICY, policy_class
from controller.rules import (COOKIE_ARP, COOKIE_DETECT, COOKIE_MISS, COOKIE_ROUTE, ETH_ARP, ETH_IPV4,
                              IPPROTO_TCP, PRIORITY_ARP, PRIORITY_DETECT, PRIORITY_MISS, PRIORITY_ROUTE,
                              FlowRule, GroupRule)
from topologies.fabric import Fabric

NextHops = ShortestPaths  # the old name


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


def switch_routes(fabric: Fabric, switch: str, fwd: Forwarding, route_table: int = 0,
                  paths: ShortestPaths | None = None, group_ids: dict | None = None,
                  ) -> tuple[list[FlowRule], list[GroupRule]]:
    """The flow entries and groups of one switch (what the adapter installs on connect).

    ``group_ids`` (port set -> group id) keeps ids stable across recomputations;
    new port sets get fresh ids, in sorted order.
    """
    node = fabric.node(switch)
    if node.get("role") != "switch" or not node.get("openflow", True):
        raise KeyError(f"{switch} is not an OpenFlow switch")
    paths = paths or ShortestPaths(fabric)
    host_ports = tuple(sorted(p for sw, p in paths.attach.values() if sw == switch))
    flows = base_rules(switch, route_table, host_ports)
    hosts = [h for h in fabric.hosts if h in paths.attach]
    # No ports: unreachable over OpenFlow, the table miss drops it.
    chosen = [(h, tuple(ps)) for h, ps in fwd.switch_table(switch, hosts) if ps]
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
                              act, cookie=COOKIE_ROUTE, table=route_table))
    return flows, groups


def compute_routes(fabric: Fabric, policy: str = DEFAULT_POLICY) -> tuple[list[FlowRule], list[GroupRule]]:
    """Flow entries and groups for every OpenFlow switch, in dpid order, of a named policy."""
    cls = policy_class(policy, "controller.routing")
    pol = cls(fabric)
    paths = ShortestPaths(fabric)
    fwd = pol.forwarding(0.0, Observation(0.0, fabric, paths, LinkLoad(fabric)))
    table = 1 if cls.sees_flows else 0
    flows: list[FlowRule] = []
    groups: list[GroupRule] = []
    for sw in fabric.openflow_switches:
        f, g = switch_routes(fabric, sw, fwd, table, paths)
        flows += f
        groups += g
    return flows, groups


def equal_cost_paths(fabric: Fabric, src: str, dst: str, next_hops: ShortestPaths | None = None,
                     limit: int | None = None) -> list[tuple[str, ...]]:
    """Every shortest switch path from src host's switch to dst host's switch, sorted
    (the first ``limit`` of them); [] when dst is unreachable over OpenFlow."""
    return (next_hops or ShortestPaths(fabric)).equal_cost_paths(src, dst, limit)
