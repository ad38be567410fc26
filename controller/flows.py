"""Per-flow entries: how the OpenFlow adapter carries out a policy's placements.

A watched flow gets an entry at its ingress switch (which stops its packets
going to the controller, and counts its bytes), and one at every switch
where base forwarding would not send it the placed way by itself; a queue
needs an entry everywhere. The entries sit in table 0, above the destination
routes (table 1): a missing per-flow entry falls through to base forwarding,
so no install order can black-hole a flow. Moves are ordered
make-before-break, so a packet takes either its old or its new path, never a mix.
"""
from __future__ import annotations

from collections import deque

from controller.policy import Flow, FlowKey, Forwarding, Placement
from controller.rules import COOKIE_FLOW_BASE, PRIORITY_FLOW, FlowDelete, FlowRule
from topologies.fabric import Fabric

__all__ = ["FlowEntry", "FlowKey", "FlowTable"]


# What a policy may derive from: a change to any of these moves Observation.flows_version.
WATCHED = frozenset({"path", "measured", "rate_gbps", "reply"})


class FlowEntry(Flow):
    """A watched flow plus what the adapter installed for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bytes_at_s: float | None = None
        self.rules: dict = {}  # switch -> the entry installed there

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        if name in WATCHED:
            table = self.__dict__.get("table")
            if table is not None:  # kept by a table: whoever changes it, the version moves
                table.version += 1

    @property
    def cookie(self) -> int:
        return COOKIE_FLOW_BASE + self.flow_id

    @property
    def ingress(self) -> str | None:
        """The switch whose entry counts the flow (the first of its path)."""
        return next(iter(self.rules), None)


class FlowTable:
    """The watched flows of one fabric and their per-flow entries."""

    def __init__(self, fabric: Fabric, route_table: int = 1, idle_timeout_s: int = 30, link_scale: float = 1.0):
        self.fabric = fabric
        self.fwd: Forwarding | None = None  # base forwarding now (the controller keeps it current)
        self.route_table = route_table
        self.idle_timeout_s = idle_timeout_s
        self.link_scale = link_scale
        self.flows: dict[FlowKey, FlowEntry] = {}
        self.by_cookie: dict[int, FlowEntry] = {}
        self.ip_to_host = {fabric.node(h)["ip"]: h for h in fabric.hosts}
        self.decisions: deque = deque(maxlen=500)
        self._next_id = 1
        self.counters = {"flows_placed": 0, "flows_moved": 0, "flows_expired": 0}
        self.version = 0  # Observation.flows_version: moves on every change but an addition

    # -- rules --------------------------------------------------------------
    def rules_for(self, e: FlowEntry, path: tuple[str, ...] | None, ingress: str | None = None,
                  ) -> dict[str, FlowRule]:
        """Per-flow entries of one path: at the ingress, and where base forwarding would
        not take the placed next hop by itself (everywhere when the flow carries a
        queue, which needs an explicit entry). No path: one counting entry at the ingress."""
        match = e.key.match()
        ingress = ingress or (path[0] if path else e.ingress)
        if path is None:
            return {ingress: FlowRule(ingress, PRIORITY_FLOW, match, (), cookie=e.cookie, goto_table=self.route_table,
                                      idle_timeout_s=self.idle_timeout_s, notify_removed=True)}
        out = {}
        for i, sw in enumerate(path):
            port = self.fabric.port(sw, path[i + 1] if i + 1 < len(path) else e.dst)
            steer = self.fwd.ports(sw, e.dst) != (port,)
            if not (i == 0 or steer or e.queue is not None):
                continue
            q = (("set_queue", e.queue),) if e.queue is not None else ()
            if steer or e.queue is not None:
                acts, goto = q + (("output", port),), None
            else:
                acts, goto = (), self.route_table  # ingress with one way on: count it, route by destination
            out[sw] = FlowRule(sw, PRIORITY_FLOW, match, acts, cookie=e.cookie, goto_table=goto,
                               idle_timeout_s=self.idle_timeout_s, notify_removed=(i == 0))
        return out

    def reroute_plan(self, e: FlowEntry, new_path) -> list[list]:
        """Make-before-break: the new path's entries beyond the divergence switch,
        then the divergence switch (the one atomic switch-over), then deletion of
        entries only the old path used."""
        return [st for st in self._reroute_stages(e, new_path) if st]

    def _reroute_stages(self, e: FlowEntry, new_path) -> tuple[list, list, list]:
        """Diff against what is installed, not a recomputation of the old path: a
        link change can turn a switch's choice into a single next hop."""
        ingress = e.ingress if e.path is None else e.path[0]
        old_path = e.path if e.path is not None else (ingress,)
        to = new_path if new_path is not None else (ingress,)
        old, new = e.rules, self.rules_for(e, new_path, ingress)
        e.rules = new
        i = next((i for i, (a, b) in enumerate(zip(old_path, to)) if a != b), min(len(old_path), len(to)))
        pivot = to[max(i - 1, 0)]
        before = [r for s, r in new.items() if s != pivot and old.get(s) != r]
        switch_over = [new[pivot]] if pivot in new and old.get(pivot) != new[pivot] else []
        cleanup = [FlowDelete(s, r.match, r.priority, strict=True) for s, r in old.items() if s not in new]
        return before, switch_over, cleanup

    # -- decisions ------------------------------------------------------------
    def new_entry(self, key: FlowKey, src: str, dst: str, now: float) -> FlowEntry:
        """The record of a flow not seen before, for the policy to decide on (not kept yet)."""
        return FlowEntry(self._next_id, key, src, dst, None, now, reply=key.reverse() in self.flows)

    def place(self, e: FlowEntry, p: Placement, ingress: str, now: float) -> list[list]:
        """Keep a new flow on its placement; the plan installs downstream entries first,
        then the ingress entry, which stops the packet-ins."""
        e.path, e.job, e.queue = p.path, p.job, p.queue
        self._next_id = max(self._next_id, e.flow_id + 1)
        self.flows[e.key] = e
        self.by_cookie[e.cookie] = e
        e.table = self  # from now on a change of what policies read moves the version
        self.counters["flows_placed"] += 1
        self._decide(now, "place", e, None, p.path, p.reason)
        rules = self.rules_for(e, p.path, ingress)
        e.rules = dict(rules)
        first = rules.pop(ingress)
        return [st for st in (list(rules.values()), [first]) if st]

    def move(self, moves: list[Placement], now: float) -> list[list]:
        """Carry out moves, stage-merged: every new path's entries, then every switch-over,
        then every clean-up."""
        stages: list[list] = [[], [], []]
        for p in moves:
            e = self.flows[p.key]
            if p.path == e.path and p.queue in (None, e.queue):
                continue
            if p.queue is not None:
                e.queue = p.queue
            if p.job is not None:
                e.job = p.job
            for i, st in enumerate(self._reroute_stages(e, p.path)):
                stages[i] += st
            self._decide(now, "move", e, e.path, p.path, p.reason)
            e.path, e.moved_at_s = p.path, now
            self.counters["flows_moved"] += 1
        return stages

    def _decide(self, now, action, e, old, new, reason) -> None:
        self.decisions.append({"time_s": now, "action": action, "flow": str(e.key), "flow_id": e.flow_id,
                               "job": e.job, "from": list(old) if old else None,
                               "to": list(new) if new else None, "reason": reason})

    # -- observations -----------------------------------------------------------
    def flow_stats(self, switch: str, stats: list[tuple[int, int]], now: float) -> None:
        """(cookie, byte_count) of per-flow entries; the ingress switch's count is the flow's."""
        for cookie, nbytes in stats:
            e = self.by_cookie.get(cookie)
            if e is None or e.ingress != switch:
                continue
            if e.bytes_at_s is not None and now > e.bytes_at_s and nbytes >= e.bytes:
                rate = (nbytes - e.bytes) * 8 / (now - e.bytes_at_s) / 1e9 / self.link_scale
                e.rate_gbps, e.measured = rate, True
            e.bytes, e.bytes_at_s = nbytes, now

    def flow_removed(self, cookie: int, now: float, match: dict | None = None) -> tuple[FlowEntry | None, list]:
        """The ingress entry expired: forget the flow and drop its other entries.
        A removed entry whose match is not the flow's is a stale one (left by an
        earlier controller): ignore it. Returns (the flow forgotten, the plan)."""
        e = self.by_cookie.get(cookie)
        if e is None or (match is not None and any(match.get(k) != v for k, v in e.key.match().items())):
            return None, []
        del self.by_cookie[cookie]
        self.flows.pop(e.key, None)
        self.version += 1
        self.counters["flows_expired"] += 1
        self._decide(now, "expire", e, e.path, None, "idle")
        rest = [FlowDelete(s, r.match, r.priority, strict=True) for s, r in e.rules.items() if s != e.ingress]
        return e, ([rest] if rest else [])

    def reserve_ids(self, highest: int) -> None:
        """New flows get ids (and cookies) above ``highest``."""
        self._next_id = max(self._next_id, highest + 1)

    def snapshot(self) -> list[dict]:
        return [{"flow_id": f.flow_id, "flow": str(f.key), "src": f.src, "dst": f.dst,
                 "path": list(f.path) if f.path is not None else None,
                 "rate_gbps": round(f.rate_gbps, 6), "job": f.job, "queue": f.queue,
                 "placed_at_s": f.placed_at_s, "moved_at_s": f.moved_at_s}
                for f in sorted(self.flows.values(), key=lambda f: f.flow_id)]
