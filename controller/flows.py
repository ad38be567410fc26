"""Per-flow placement for the congestion-aware policies.

A new TCP flow (first packet copied to the controller) goes on the least
loaded of its equal-cost paths. Every poll, elephants (Hedera: above 10% of
the NIC rate) are re-placed by Global First Fit on their natural demands,
trying each flow's current path first, so a flow moves only when its path
lacks room and another has it, and never twice within ``hold_s``.

Per-flow entries sit in table 0 above the destination routes (table 1), only
at the ingress switch and at switches with a choice of next hop: elsewhere
the destination route already is the one way on. A missing per-flow entry
falls through to ECMP, so no install order can black-hole a flow; reroutes
are still ordered make-before-break so a packet takes either its old or its
new path, never a mix.
"""
from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from controller.hedera import estimate_demands, global_first_fit, path_links
from controller.load import LinkLoad
from controller.routing import NextHops, equal_cost_paths
from controller.rules import (COOKIE_FLOW_BASE, ETH_IPV4, IPPROTO_TCP, IPPROTO_UDP, PRIORITY_FLOW, FlowDelete,
                              FlowRule)
from topologies.fabric import Fabric


@dataclass(frozen=True)
class FlowKey:
    src_ip: str
    dst_ip: str
    proto: int
    sport: int
    dport: int

    def match(self) -> dict:
        m = {"eth_type": ETH_IPV4, "ipv4_src": self.src_ip, "ipv4_dst": self.dst_ip, "ip_proto": self.proto}
        if self.proto == IPPROTO_TCP:
            m.update(tcp_src=self.sport, tcp_dst=self.dport)
        elif self.proto == IPPROTO_UDP:
            m.update(udp_src=self.sport, udp_dst=self.dport)
        return m

    def __str__(self):
        return f"{self.src_ip}:{self.sport}->{self.dst_ip}:{self.dport}/{self.proto}"

    def reverse(self) -> "FlowKey":
        return FlowKey(self.dst_ip, self.src_ip, self.proto, self.dport, self.sport)


@dataclass
class FlowEntry:
    flow_id: int
    key: FlowKey
    src: str
    dst: str
    path: tuple[str, ...]
    placed_at_s: float
    moved_at_s: float | None = None  # None: never moved
    job: str | None = None
    queue: int | None = None
    bytes: int = 0
    bytes_at_s: float | None = None
    rate_gbps: float = 0.0  # real-cluster units
    measured: bool = False
    # The reverse direction of a connection we already know (its ACKs, mostly):
    # no demand of its own until its counters say otherwise.
    reply: bool = False
    rules: dict = field(default_factory=dict)  # switch -> the entry we installed there

    @property
    def cookie(self) -> int:
        return COOKIE_FLOW_BASE + self.flow_id


@dataclass(frozen=True)
class CongestionConfig:
    poll_s: float = 0.5
    tau_s: float = 1.0
    elephant_fraction: float = 0.1
    hold_s: float = 2.0
    idle_timeout_s: int = 30
    link_scale: float = 1.0
    max_paths: int = 256

    def __post_init__(self):
        for name in ("poll_s", "tau_s", "link_scale", "max_paths"):
            if not getattr(self, name) > 0:
                raise ValueError(f"controller.{name}: expected a positive number, found {getattr(self, name)!r}")
        if not 0 <= self.elephant_fraction <= 1:
            raise ValueError(f"controller.elephant_fraction: expected 0..1, found {self.elephant_fraction!r}")
        if self.hold_s < 0 or self.idle_timeout_s < 0:
            raise ValueError("controller.hold_s and idle_timeout_s: expected >= 0")


@dataclass
class FlowScheduler:
    fabric: Fabric
    next_hops: NextHops
    load: LinkLoad
    cfg: CongestionConfig = field(default_factory=CongestionConfig)
    route_table: int = 1

    def __post_init__(self):
        self.flows: dict[FlowKey, FlowEntry] = {}
        self.by_cookie: dict[int, FlowEntry] = {}
        self.ip_to_host = {self.fabric.node(h)["ip"]: h for h in self.fabric.hosts}
        self.decisions: deque = deque(maxlen=500)
        self.pinned: dict[tuple[str, str], tuple[str | None, tuple[str, ...], int | None]] = {}
        self._next_id = 1
        self.counters = {"flows_placed": 0, "flows_moved": 0, "flows_expired": 0, "rebalances": 0}

    # -- rules --------------------------------------------------------------
    def rules_for(self, e: FlowEntry, path: tuple[str, ...]) -> dict[str, FlowRule]:
        """Per-flow entries of one path: at the ingress and where there is a choice
        (everywhere when the flow carries a queue, which needs an explicit entry)."""
        dst_sw = path[-1]
        match = e.key.match()
        out = {}
        for i, sw in enumerate(path):
            nxt = path[i + 1] if i + 1 < len(path) else e.dst
            choice = len(self.next_hops.ports(sw, dst_sw) or ()) > 1
            if not (i == 0 or choice or e.queue is not None):
                continue
            q = (("set_queue", e.queue),) if e.queue is not None else ()
            if choice or e.queue is not None:
                acts, goto = q + (("output", self.fabric.port(sw, nxt)),), None
            else:
                acts, goto = (), self.route_table  # ingress with one way on: count it, route by destination
            out[sw] = FlowRule(sw, PRIORITY_FLOW, match, acts, cookie=e.cookie, goto_table=goto,
                               idle_timeout_s=self.cfg.idle_timeout_s, notify_removed=(i == 0))
        return out

    def reroute_plan(self, e: FlowEntry, new_path: tuple[str, ...]) -> list[list]:
        """Make-before-break: the new path's entries beyond the divergence switch,
        then the divergence switch (the one atomic switch-over), then deletion of
        entries only the old path used."""
        return [st for st in self._reroute_stages(e, new_path) if st]

    def _reroute_stages(self, e: FlowEntry, new_path: tuple[str, ...]) -> tuple[list, list, list]:
        """Diff against what is installed, not a recomputation of the old path: a
        link change can turn a switch's choice into a single next hop."""
        old, new = e.rules, self.rules_for(e, new_path)
        e.rules = new
        i = next((i for i, (a, b) in enumerate(zip(e.path, new_path)) if a != b), min(len(e.path), len(new_path)))
        pivot = new_path[max(i - 1, 0)]
        before = [r for s, r in new.items() if s != pivot and old.get(s) != r]
        switch_over = [new[pivot]] if pivot in new and old.get(pivot) != new[pivot] else []
        cleanup = [FlowDelete(s, r.match, r.priority, strict=True) for s, r in old.items() if s not in new]
        return before, switch_over, cleanup

    # -- placement ----------------------------------------------------------
    def _pending(self) -> dict:
        """Links carrying flows whose traffic the counters do not show yet."""
        pend: dict = {}
        unmeasured = [f for f in self.flows.values() if not f.measured and not f.reply]
        if unmeasured:
            demands = self.natural_demands(unmeasured)
            for f, d in zip(unmeasured, demands):
                for ln in path_links(f.src, f.path, f.dst):
                    pend[ln] = pend.get(ln, 0.0) + d
        return pend

    def is_elephant(self, f: FlowEntry) -> bool:
        return f.measured and f.rate_gbps >= self.cfg.elephant_fraction * self.fabric.host_link_gbps(f.src)

    def natural_demands(self, flows: list[FlowEntry]) -> list[float]:
        """Hedera's natural demand of each flow in Gb/s, among the flows that may be
        large: measured elephants and flows not measured yet, but no mice and no
        reply streams. Counting a connection's ACK stream would halve the demand
        of a data flow between the same two hosts (symmetric patterns such as
        stride(n/2)) and let GFF stack two elephants on one link."""
        ids = {id(f) for f in flows}
        everyone = [f for f in self.flows.values()
                    if id(f) in ids or self.is_elephant(f) or (not f.measured and not f.reply)]
        idx = {id(f): i for i, f in enumerate(everyone)}
        frac = estimate_demands([(f.src, f.dst) for f in everyone])
        return [frac[idx[id(f)]] * self.fabric.host_link_gbps(f.src) if id(f) in idx
                else self.fabric.host_link_gbps(f.src) for f in flows]

    def path_cost(self, src: str, path: tuple[str, ...], dst: str, pending: dict) -> tuple[float, float]:
        """(max, sum) utilization over the switch-to-switch links: the host links are
        common to every candidate, and would hide the differences when busy."""
        utils = [(self.load.load(*ln) + pending.get(ln, 0.0)) / self.load.capacity_gbps[ln]
                 for ln in path_links(src, path, dst)[1:-1]]
        return (round(max(utils, default=0.0), 9), round(sum(utils), 9))

    def new_flow(self, key: FlowKey, now: float) -> list[list]:
        """Place a flow seen for the first time; [] when known or not ours."""
        if key in self.flows:
            return []
        src, dst = self.ip_to_host.get(key.src_ip), self.ip_to_host.get(key.dst_ip)
        if src is None or dst is None or src == dst:
            return []
        paths = equal_cost_paths(self.fabric, src, dst, self.next_hops, limit=self.cfg.max_paths)
        if not paths:
            return []
        job, queue = None, None
        pin = self.pinned.get((src, dst))
        if pin is not None and pin[1] in paths:
            job, path, queue = pin[0], pin[1], pin[2]
            reason = f"announced placement of job {job}"
        else:
            pending = self._pending()
            salt = zlib.crc32(str(key).encode())
            path = min(paths, key=lambda p: (self.path_cost(src, p, dst, pending),
                                             zlib.crc32(repr(p).encode()) ^ salt))
            reason = "least-loaded equal-cost path"
        e = FlowEntry(self._next_id, key, src, dst, path, now, job=job, queue=queue,
                      reply=key.reverse() in self.flows)
        self._next_id += 1
        self.flows[key] = e
        self.by_cookie[e.cookie] = e
        self.counters["flows_placed"] += 1
        self._decide(now, "place", e, None, path, reason)
        rules = self.rules_for(e, path)
        e.rules = dict(rules)
        ingress = rules.pop(path[0])
        # Downstream entries first: the ingress entry stops the packet-ins.
        return [st for st in (list(rules.values()), [ingress]) if st]

    def flow_stats(self, switch: str, stats: list[tuple[int, int]], now: float) -> None:
        """(cookie, byte_count) of per-flow entries; the ingress switch's count is the flow's."""
        for cookie, nbytes in stats:
            e = self.by_cookie.get(cookie)
            if e is None or e.path[0] != switch:
                continue
            if e.bytes_at_s is not None and now > e.bytes_at_s and nbytes >= e.bytes:
                rate = (nbytes - e.bytes) * 8 / (now - e.bytes_at_s) / 1e9 / self.cfg.link_scale
                e.rate_gbps, e.measured = rate, True
            e.bytes, e.bytes_at_s = nbytes, now

    def flow_removed(self, cookie: int, now: float, match: dict | None = None) -> list[list]:
        """The ingress entry expired: forget the flow and drop its other entries.
        A removed entry whose match is not the flow's is a stale one (left by an
        earlier controller): ignore it."""
        e = self.by_cookie.get(cookie)
        if e is None or (match is not None and any(match.get(k) != v for k, v in e.key.match().items())):
            return []
        del self.by_cookie[cookie]
        self.flows.pop(e.key, None)
        self.counters["flows_expired"] += 1
        self._decide(now, "expire", e, e.path, None, "idle")
        rest = [FlowDelete(s, r.match, r.priority, strict=True) for s, r in e.rules.items() if s != e.path[0]]
        return [rest] if rest else []

    def reserve_ids(self, highest: int) -> None:
        """New flows get ids (and cookies) above ``highest``."""
        self._next_id = max(self._next_id, highest + 1)

    def rebalance(self, now: float) -> list[list]:
        """Global First Fit over the elephants; returns the reroutes, stage-merged."""
        self.counters["rebalances"] += 1
        flows = sorted(self.flows.values(), key=lambda f: f.flow_id)
        eleph = [f for f in flows if self.is_elephant(f)]
        if not eleph:
            return []
        demands = self.natural_demands(eleph)
        # Mice stay where they are, as background. Their own counters say what
        # they carry; the EWMA link loads would lag behind the last moves and
        # make elephants chase their own shadows.
        background: dict = {}
        eleph_ids = {id(f) for f in eleph}
        for f in flows:
            if id(f) not in eleph_ids and f.measured:
                for ln in path_links(f.src, f.path, f.dst):
                    background[ln] = background.get(ln, 0.0) + f.rate_gbps
        # Hedera reserves nothing for mice. Counting every ACK stream would make
        # a path that is free but for some ACKs too small for a flow at full
        # NIC demand; only mice beyond one mouse's worth of a link count.
        for ln, gbps in list(background.items()):
            background[ln] = max(0.0, gbps - self.cfg.elephant_fraction * self.load.capacity_gbps[ln])
        held = [f for f in eleph if (f.moved_at_s is not None and now - f.moved_at_s < self.cfg.hold_s)
                or (f.src, f.dst) in self.pinned]
        free = [f for f in eleph if f not in held]
        order = held + free
        cands = []
        for f in order:
            if f in held:
                cands.append([path_links(f.src, f.path, f.dst)])
                continue
            others = [p for p in equal_cost_paths(self.fabric, f.src, f.dst, self.next_hops,
                                                  limit=self.cfg.max_paths) if p != f.path]
            cands.append([path_links(f.src, p, f.dst) for p in [f.path] + others])
        dem = {id(f): d for f, d in zip(eleph, demands)}
        chosen, _ = global_first_fit([dem[id(f)] for f in order], cands,
                                     lambda ln: self.load.capacity_gbps[ln], background)
        stages: list[list] = [[], [], []]
        for f, c in zip(order, chosen):
            if not c:  # 0: stays where it fits; None: no room anywhere, stays
                continue
            new_path = tuple(n for n, _ in cands[order.index(f)][c][1:])
            for i, st in enumerate(self._reroute_stages(f, new_path)):
                stages[i] += st
            self._decide(now, "move", f, f.path, new_path, f"GFF: {dem[id(f)]:.3g} Gb/s fits")
            f.path, f.moved_at_s = new_path, now
            self.counters["flows_moved"] += 1
        return [st for st in stages if st]

    def links_changed(self, down: set, now: float) -> tuple[list, list, list]:
        """Move the flows that cross a down link onto the best path left (the
        old path is broken already, so there is nothing to make before)."""
        stages: tuple[list, list, list] = ([], [], [])
        pending = self._pending()
        for f in sorted(self.flows.values(), key=lambda f: f.flow_id):
            if not any(frozenset(ln) in down for ln in path_links(f.src, f.path, f.dst)):
                continue
            paths = equal_cost_paths(self.fabric, f.src, f.dst, self.next_hops, limit=self.cfg.max_paths)
            if not paths:
                continue  # cut off: the entries idle out
            new_path = min(paths, key=lambda p: (self.path_cost(f.src, p, f.dst, pending), p))
            for i, st in enumerate(self._reroute_stages(f, new_path)):
                stages[i].extend(st)
            self._decide(now, "move", f, f.path, new_path, "link down")
            f.path, f.moved_at_s = new_path, now
            self.counters["flows_moved"] += 1
        return stages

    def _decide(self, now, action, e, old, new, reason) -> None:
        self.decisions.append({"time_s": now, "action": action, "flow": str(e.key), "flow_id": e.flow_id,
                               "job": e.job, "from": list(old) if old else None,
                               "to": list(new) if new else None, "reason": reason})

    def snapshot(self) -> list[dict]:
        return [{"flow_id": f.flow_id, "flow": str(f.key), "src": f.src, "dst": f.dst, "path": list(f.path),
                 "rate_gbps": round(f.rate_gbps, 6), "job": f.job, "queue": f.queue,
                 "placed_at_s": f.placed_at_s, "moved_at_s": f.moved_at_s}
                for f in sorted(self.flows.values(), key=lambda f: f.flow_id)]
