"""A fake OpenFlow 1.3 network: the flow and group tables of every switch, applied
to a packet hop by hop, to answer "where does this packet go".

Built from the same ``Fabric`` the testbed wires up, plus the rules the
policies emit. It follows select groups by a deterministic 5-tuple hash (or
every live bucket, to enumerate every path) and reports loops, black holes
and misdelivery. Like OVS, it refuses a flow that points at a missing group,
and deleting a group deletes the flows that use it, so install order matters
here as it does on a real switch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from controller.paths import five_tuple_hash
from controller.rules import (GROUP_ALL, ETH_ARP, ETH_IPV4, IPPROTO_TCP, IPPROTO_UDP, FlowDelete, FlowRule,
                              GroupDelete, GroupRule, RuleError, ip_to_int)
from topologies.fabric import Fabric

MAX_HOPS = 64

DELIVERED = "delivered"
DROPPED = "dropped"
LOOP = "loop"
CONTROLLER = "controller"
MISDELIVERED = "misdelivered"


@dataclass(frozen=True)
class Trace:
    """One packet's journey: the nodes it visited, from the source host on."""
    outcome: str
    nodes: tuple[str, ...]
    reason: str = ""
    queues: tuple[tuple[str, int, int], ...] = ()  # (switch, out port, queue id)

    @property
    def delivered(self) -> bool:
        return self.outcome == DELIVERED

    @property
    def switches(self) -> tuple[str, ...]:
        return self.nodes[1:-1] if self.outcome in (DELIVERED, MISDELIVERED) else self.nodes[1:]

    @property
    def links(self) -> tuple[tuple[str, str], ...]:
        """Directed links crossed, (from, to)."""
        return tuple(zip(self.nodes, self.nodes[1:]))


class FakeOFError(RuntimeError):
    """The fake switch refused a message the way OVS would."""


@functools.lru_cache(maxsize=65536)
def _masked(field: str, value):
    """A match value as an int for masked comparison (addresses are strings)."""
    if field.startswith(("ipv4", "arp_spa", "arp_tpa")):
        return ip_to_int(value)
    if field.startswith("eth_") and isinstance(value, str):
        return int(value.replace(":", ""), 16)
    return value


def field_matches(field: str, want, have) -> bool:
    if have is None:
        return False
    if isinstance(want, tuple):
        value, mask = want
        m = _masked(field, mask)
        return _masked(field, value) & m == _masked(field, have) & m
    return _masked(field, want) == _masked(field, have)


class FakeSwitch:
    def __init__(self, name: str, dpid: int):
        self.name = name
        self.dpid = dpid
        self.flows: dict[tuple, FlowRule] = {}
        self.groups: dict[int, GroupRule] = {}
        self._index: dict | None = None  # rebuilt lazily after a change

    def apply(self, op) -> None:
        self._index = None
        if isinstance(op, FlowRule):
            for a in op.actions:
                if a[0] == "group" and a[1] not in self.groups:
                    raise FakeOFError(f"{self.name}: flow points at missing group {a[1]}")
            self.flows[op.key] = op
        elif isinstance(op, GroupRule):
            for _, acts in op.buckets:
                if any(a[0] == "group" for a in acts):
                    raise FakeOFError(f"{self.name}: chained groups are not used by dtnet")
            self.groups[op.group_id] = op  # add or modify
        elif isinstance(op, FlowDelete):
            for k, r in list(self.flows.items()):
                if r.table != op.table:
                    continue
                if op.strict:
                    if r.priority == op.priority and r.match == op.match:
                        del self.flows[k]
                elif (r.cookie & op.cookie_mask) == (op.cookie & op.cookie_mask) and \
                        all(r.match.get(f) == v for f, v in op.match.items()):
                    del self.flows[k]
        elif isinstance(op, GroupDelete):
            gone = set(self.groups) if op.group_id == GROUP_ALL else {op.group_id}
            for g in gone:
                self.groups.pop(g, None)
            # OpenFlow: deleting a group removes the flows that forward to it.
            for k, r in list(self.flows.items()):
                if any(a[0] == "group" and a[1] in gone for a in r.actions):
                    del self.flows[k]
        else:
            raise RuleError(f"unknown operation {op!r}")

    def lookup(self, pkt: dict, table: int = 0) -> FlowRule | None:
        """The highest-priority entry matching pkt (tuple-space search, as OVS does)."""
        if self._index is None:
            self._index = self._build_index()
        for prio, exact, masked in self._index.get(table, ()):
            hits = []
            for shape, entries in exact.items():
                r = entries.get(tuple(pkt.get(f) for f in shape))
                if r is not None:
                    hits.append(r)
            hits += [r for r in masked if all(field_matches(f, v, pkt.get(f)) for f, v in r.match.items())]
            if len(hits) > 1:
                # OpenFlow leaves overlapping equal-priority entries undefined.
                raise FakeOFError(f"{self.name}: ambiguous match at priority {prio}: "
                                  f"{hits[0].match} and {hits[1].match}")
            if hits:
                return hits[0]
        return None

    def _build_index(self) -> dict:
        by_prio: dict[tuple[int, int], tuple[dict, list]] = {}
        for r in self.flows.values():
            exact, masked = by_prio.setdefault((r.table, r.priority), ({}, []))
            if any(isinstance(v, tuple) for v in r.match.values()):
                masked.append(r)
            else:
                shape = tuple(sorted(r.match))
                exact.setdefault(shape, {})[tuple(r.match[f] for f in shape)] = r
        index: dict[int, list] = {}
        for (table, prio), (exact, masked) in sorted(by_prio.items(), key=lambda kv: -kv[0][1]):
            index.setdefault(table, []).append((prio, exact, masked))
        return index


def flow_hash(pkt: dict, salt: int) -> int:
    """Deterministic per-flow hash, salted per switch like independent ECMP seeds."""
    l4 = (pkt.get("tcp_src"), pkt.get("tcp_dst")) if pkt.get("ip_proto") == IPPROTO_TCP \
        else (pkt.get("udp_src"), pkt.get("udp_dst"))
    return five_tuple_hash(pkt.get("ipv4_src"), pkt.get("ipv4_dst"), pkt.get("ip_proto"), l4[0], l4[1], salt)


class FakeNetwork:
    """Every OpenFlow switch of a fabric, wired by the fabric's port numbers."""

    def __init__(self, fabric: Fabric, ops=()):
        self.fabric = fabric
        self.switches: dict[str, FakeSwitch] = {}
        for s in fabric.openflow_switches:
            self.switches[s] = FakeSwitch(s, fabric.node(s)["dpid"])
        # (node, port) -> (peer, peer port)
        self.wire: dict[tuple[str, int], tuple[str, int]] = {}
        for a, b, d in fabric.graph.edges(data=True):
            pa, pb = d["ports"][a], d["ports"][b]
            self.wire[a, pa] = (b, pb)
            self.wire[b, pb] = (a, pa)
        self.down: set[frozenset] = set()
        self.apply(ops)

    def apply(self, ops) -> None:
        """Apply rules and deletions in order, as a switch would."""
        for op in ops:
            if op.switch not in self.switches:
                raise FakeOFError(f"no OpenFlow switch {op.switch!r}")
            self.switches[op.switch].apply(op)

    def install(self, flows, groups) -> None:
        """Groups first: a flow may not point at a group that does not exist yet."""
        self.apply(list(groups) + list(flows))

    def set_link(self, a: str, b: str, up: bool) -> None:
        if not self.fabric.graph.has_edge(a, b):
            raise KeyError(f"no link {a}-{b}")
        (self.down.discard if up else self.down.add)(frozenset((a, b)))

    def _port_live(self, node: str, port: int) -> bool:
        peer = self.wire.get((node, port))
        return peer is not None and frozenset((node, peer[0])) not in self.down

    # -- packets ------------------------------------------------------------
    def packet(self, src: str, dst: str, proto: int = IPPROTO_TCP, sport: int = 40000,
               dport: int = 5000) -> dict:
        s, d = self.fabric.node(src), self.fabric.node(dst)
        pkt = {"eth_type": ETH_IPV4, "eth_src": s["mac"], "eth_dst": d["mac"],
               "ipv4_src": s["ip"], "ipv4_dst": d["ip"], "ip_proto": proto}
        if proto == IPPROTO_TCP:
            pkt.update(tcp_src=sport, tcp_dst=dport)
        elif proto == IPPROTO_UDP:
            pkt.update(udp_src=sport, udp_dst=dport)
        return pkt

    def arp_request(self, src: str, target_ip: str) -> dict:
        s = self.fabric.node(src)
        return {"eth_type": ETH_ARP, "eth_src": s["mac"], "eth_dst": "ff:ff:ff:ff:ff:ff",
                "arp_op": 1, "arp_spa": s["ip"], "arp_tpa": target_ip}

    def trace(self, src: str, dst: str, proto: int = IPPROTO_TCP, sport: int = 40000,
              dport: int = 5000) -> Trace:
        """The one path the select-group hashes give this 5-tuple."""
        return self.send(src, self.packet(src, dst, proto, sport, dport))[0]

    def all_traces(self, src: str, dst: str, proto: int = IPPROTO_TCP, sport: int = 40000,
                   dport: int = 5000) -> list[Trace]:
        """Every path a packet could take, following every live bucket of select groups."""
        return self.send(src, self.packet(src, dst, proto, sport, dport), all_buckets=True)

    def send(self, src_host: str, pkt: dict, all_buckets: bool = False) -> list[Trace]:
        sw, port = self.fabric.attachment(src_host)
        out: list[Trace] = []
        if not self._port_live(src_host, self.fabric.port(src_host, sw)):
            return [Trace(DROPPED, (src_host,), "host link down")]
        self._at(sw, port, pkt, (src_host,), (), all_buckets, out)
        return out

    def _at(self, sw: str, in_port: int, pkt: dict, nodes: tuple, queues: tuple,
            all_buckets: bool, out: list) -> None:
        nodes = nodes + (sw,)
        if sw not in self.switches:
            out.append(Trace(DROPPED, nodes, f"{sw} is not an OpenFlow switch"))
            return
        if nodes.count(sw) > 1 or len(nodes) > MAX_HOPS:
            out.append(Trace(LOOP, nodes, f"revisited {sw}"))
            return
        fs = self.switches[sw]
        actions, table = (), 0
        while True:  # the pipeline: apply-actions of each table, then goto
            rule = fs.lookup(dict(pkt, in_port=in_port), table)
            if rule is None:
                out.append(Trace(DROPPED, nodes, f"no rule at {sw} table {table}"))
                return
            actions += rule.actions
            if rule.goto_table is None:
                break
            table = rule.goto_table
        for acts in self._expand(fs, actions, pkt, all_buckets):
            queue = None
            outputs = []
            for a in acts:
                if a[0] == "set_queue":
                    queue = a[1]
                elif a[0] == "output":
                    outputs.append((a[1], queue))
                elif a[0] == "controller":
                    out.append(Trace(CONTROLLER, nodes, f"to controller at {sw}", queues))
            if not outputs and not any(a[0] == "controller" for a in acts):
                out.append(Trace(DROPPED, nodes, f"{sw} drops it"))
            for port, q in outputs:
                self._egress(sw, in_port, port, q, pkt, nodes, queues, all_buckets, out)

    def _expand(self, fs: FakeSwitch, actions: tuple, pkt: dict, all_buckets: bool) -> list[tuple]:
        """Action lists after resolving the group action (one list per chosen bucket)."""
        pre, group_id = [], None
        for a in actions:
            if a[0] == "group":
                group_id = a[1]
            else:
                pre.append(a)
        if group_id is None:
            return [tuple(pre)]
        g = fs.groups[group_id]
        live = [(w, acts) for w, acts in g.buckets if self._bucket_live(fs.name, acts)]
        if g.type == "all":
            chosen = [acts for _, acts in live]
        elif g.type in ("indirect", "fast_failover"):
            chosen = [live[0][1]] if live else []
        else:
            live = [(w, acts) for w, acts in live if w > 0]
            if not live:
                chosen = []
            elif all_buckets:
                chosen = [acts for _, acts in live]
            else:
                h = flow_hash(pkt, fs.dpid) % sum(w for w, _ in live)
                for w, acts in live:
                    if h < w:
                        chosen = [acts]
                        break
                    h -= w
        if not chosen:
            return [tuple(pre)]  # no live bucket: the packet is dropped
        return [tuple(pre) + acts for acts in chosen]

    def _bucket_live(self, sw: str, acts: tuple) -> bool:
        # The adapter sets each bucket's watch_port to its output port, so a
        # bucket dies with its link, as on OVS.
        return all(self._port_live(sw, a[1]) for a in acts if a[0] == "output")

    def _egress(self, sw: str, in_port: int, port: int, queue, pkt: dict, nodes: tuple,
                queues: tuple, all_buckets: bool, out: list) -> None:
        if port == in_port:
            out.append(Trace(DROPPED, nodes, f"{sw} outputs to the in_port"))
            return
        if (sw, port) not in self.wire:
            out.append(Trace(DROPPED, nodes, f"{sw} has no port {port}"))
            return
        if not self._port_live(sw, port):
            out.append(Trace(DROPPED, nodes, f"link down at {sw} port {port}"))
            return
        if queue is not None:
            queues = queues + ((sw, port, queue),)
        peer, peer_port = self.wire[sw, port]
        pn = self.fabric.node(peer)
        if pn["role"] == "host":
            ok = pn.get("ip") == pkt.get("ipv4_dst")
            out.append(Trace(DELIVERED if ok else MISDELIVERED, nodes + (peer,), "", queues))
            return
        self._at(peer, peer_port, pkt, nodes, queues, all_buckets, out)
