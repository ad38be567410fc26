"""``congestion-aware``: per-flow placement on measured load, and Hedera's Global First Fit.

A new TCP flow goes on the least loaded of its equal-cost paths. Every poll,
elephants (Hedera: above ``elephant_fraction`` of the NIC rate) are re-placed
by Global First Fit on their natural demands, trying each flow's current path
first, so a flow moves only when its path lacks room and another has it, and
never twice within ``hold_s``. Flows crossing a link that went down move to the
best path left.
"""
from __future__ import annotations

import zlib

import numpy as np

from controller.hedera import estimate_demands
from controller.params import Param
from controller.paths import path_links
from controller.policies.scale import Candidates, LinkIndex, PendingDemands, first_fit, least_loaded
from controller.policies.static import OBSERVE_PARAMS
from controller.policy import EcmpForwarding, Flow, Forwarding, Observation, Placement, Policy

FLOW_PARAMS = {
    **OBSERVE_PARAMS,
    "elephant_fraction": Param(0.1, ge=0, le=1, doc="a flow above this share of its NIC rate is an elephant"),
    "hold_s": Param(2.0, ge=0, le=3600, doc="minimum time between two moves of one flow"),
    "idle_timeout_s": Param(30, ge=0, le=65535, doc="a placed flow idle this long is forgotten"),
    "max_paths": Param(256, ge=1, le=1 << 16, doc="equal-cost paths considered per flow (the first, sorted)"),
}


class CongestionAware(Policy):
    """Least-loaded placement of new flows; GFF re-placement of elephants every poll."""
    PARAMS = FLOW_PARAMS
    sees_flows = True

    def __init__(self, fabric, params=None):
        super().__init__(fabric, params)
        # (src, dst) -> (job, path, queue): placements announced for a job, kept as they are.
        self.pinned: dict[tuple[str, str], tuple[str | None, tuple[str, ...], int | None]] = {}
        self.counters = {"rebalances": 0}
        self._links = None  # LinkIndex, Candidates and PendingDemands: made on first use

    @property
    def links(self) -> LinkIndex:
        if self._links is None:
            self._links = LinkIndex(self.fabric)
            self.candidates = Candidates(self._links)
            self.pend = PendingDemands(self._links, self.is_elephant, self.nic_gbps)
        return self._links

    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return EcmpForwarding(obs.paths)

    def nic_gbps(self, host: str) -> float:
        return self.links.nic_gbps[host]

    # -- demands --------------------------------------------------------------
    def is_elephant(self, f: Flow) -> bool:
        return f.measured and f.rate_gbps >= self.params.elephant_fraction * self.nic_gbps(f.src)

    def natural_demands(self, flows: list[Flow], obs: Observation) -> list[float]:
        """Hedera's natural demand of each flow in Gb/s, among the flows that may be
        large: measured elephants and flows not measured yet, but no mice and no
        reply streams. Counting a connection's ACK stream would halve the demand
        of a data flow between the same two hosts (symmetric patterns such as
        stride(n/2)) and let GFF stack two elephants on one link."""
        ids = {id(f) for f in flows}
        everyone = [f for f in obs.flows.values()
                    if id(f) in ids or self.is_elephant(f) or (not f.measured and not f.reply)]
        idx = {id(f): i for i, f in enumerate(everyone)}
        frac = estimate_demands([(f.src, f.dst) for f in everyone])
        return [frac[idx[id(f)]] * self.nic_gbps(f.src) if id(f) in idx else self.nic_gbps(f.src) for f in flows]

    def pending(self, obs: Observation) -> dict:
        """Links carrying flows whose traffic the counters do not show yet."""
        pend: dict = {}
        unmeasured = [f for f in obs.flows.values() if not f.measured and not f.reply and f.path is not None]
        if unmeasured:
            for f, d in zip(unmeasured, self.natural_demands(unmeasured, obs)):
                for ln in path_links(f.src, f.path, f.dst):
                    pend[ln] = pend.get(ln, 0.0) + d
        return pend

    def path_cost(self, src: str, path: tuple[str, ...], dst: str, pending: dict, obs: Observation):
        """(max, sum) utilization over the switch-to-switch links: the host links are
        common to every candidate, and would hide the differences when busy."""
        loads = obs.loads
        utils = [(loads.load(*ln) + pending.get(ln, 0.0)) / loads.capacity_gbps[ln]
                 for ln in path_links(src, path, dst)[1:-1]]
        return (round(max(utils, default=0.0), 9), round(sum(utils), 9))

    # -- hooks ----------------------------------------------------------------
    def flow_started(self, now: float, flow: Flow, obs: Observation) -> Placement | None:
        links = self.links  # (made on first use, with the candidates)
        cs = self.candidates.get(obs.paths, flow.src, flow.dst, self.params.max_paths)
        if cs is None:
            return None
        pin = self.pinned.get((flow.src, flow.dst))
        if pin is not None and pin[1] in cs.index:
            return Placement(flow.key, pin[1], queue=pin[2], job=pin[0],
                             reason=f"announced placement of job {pin[0]}")
        links.sync_loads(obs.loads)
        self.pend.sync(obs)
        i = least_loaded(cs, links, zlib.crc32(str(flow.key).encode()))
        return Placement(flow.key, cs.path(i), reason="least-loaded equal-cost path")

    def poll(self, now: float, obs: Observation) -> list[Placement]:
        """Global First Fit over the elephants."""
        self.counters["rebalances"] += 1
        flows = sorted((f for f in obs.flows.values() if f.path is not None), key=lambda f: f.flow_id)
        eleph = [f for f in flows if self.is_elephant(f)]
        if not eleph:
            return []
        demands = self.natural_demands(eleph, obs)
        # Mice stay where they are, as background. Their own counters say what
        # they carry; the EWMA link loads would lag behind the last moves and
        # make elephants chase their own shadows.
        links = self.links
        reserved = np.zeros(len(links.cap))
        eleph_ids = {id(f) for f in eleph}
        for f in flows:
            if id(f) not in eleph_ids and f.measured:
                for i in links.ids(f.src, f.path, f.dst):
                    reserved[i] += f.rate_gbps
        # Hedera reserves nothing for mice. Counting every ACK stream would make
        # a path that is free but for some ACKs too small for a flow at full
        # NIC demand; only mice beyond one mouse's worth of a link count.
        reserved = np.maximum(0.0, reserved - self.params.elephant_fraction * links.cap)
        hold_s = self.params.hold_s
        held = [f for f in eleph if (f.moved_at_s is not None and now - f.moved_at_s < hold_s)
                or (f.src, f.dst) in self.pinned]
        held_ids = {id(f) for f in held}
        order = held + [f for f in eleph if id(f) not in held_ids]
        current, cands = [], []
        for f in order:
            current.append(links.ids(f.src, f.path, f.dst))
            cs = None if id(f) in held_ids else \
                self.candidates.get(obs.paths, f.src, f.dst, self.params.max_paths)
            cands.append((cs, f.path) if cs is not None else None)
        dem = {id(f): d for f, d in zip(eleph, demands)}
        chosen = first_fit(order, [dem[id(f)] for f in order], current, cands, links, reserved)
        moves = []
        for f, c, cand in zip(order, chosen, cands):
            if c is None or c == -1:  # stays where it fits; or no room anywhere, stays
                continue
            moves.append(Placement(f.key, cand[0].path(c), reason=f"GFF: {dem[id(f)]:.3g} Gb/s fits"))
        return moves

    def links_changed(self, now: float, obs: Observation) -> list[Placement]:
        """Move the flows that cross a down link onto the best path left (the
        old path is broken already, so there is nothing to make before)."""
        down = obs.links_down
        pending = self.pending(obs)
        moves = []
        for f in sorted(obs.flows.values(), key=lambda f: f.flow_id):
            if f.path is None or not any(frozenset(ln) in down for ln in path_links(f.src, f.path, f.dst)):
                continue
            paths = obs.paths.equal_cost_paths(f.src, f.dst, limit=self.params.max_paths)
            if not paths:
                continue  # cut off: the entries idle out
            new_path = min(paths, key=lambda p: (self.path_cost(f.src, p, f.dst, pending, obs), p))
            moves.append(Placement(f.key, new_path, reason="link down"))
        return moves
