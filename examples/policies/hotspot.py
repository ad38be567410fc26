"""Hot-spot relief: a dynamic policy, written only against dtnet's public policy API.

New flows go on the equal-cost path whose busiest link is least loaded now
(by measured load only, so flows that start together pile onto one path
until the counters show them). Every poll, the busiest switch-to-switch link
above ``hot_fraction`` of its capacity gives up its largest flow to the
equal-cost path that has the most room for it, at most ``moves_per_poll``
flows a poll. Simpler than Hedera: no demand estimation, no global fit.
"""
from __future__ import annotations

from controller.params import Param
from controller.policy import Observation, Placement, Policy, path_links


class HotSpot(Policy):
    """New flows on the path that looks least loaded; every poll, the largest flow of the
    hottest link moves to the path with the most room for it."""
    PARAMS = {
        "poll_s": Param(0.5, gt=0, doc="how often loads are read and hot links relieved"),
        "hot_fraction": Param(0.9, gt=0, le=1, doc="a link above this share of its capacity is hot"),
        "moves_per_poll": Param(1, ge=1, le=1000, doc="flows moved per poll at most"),
        "idle_timeout_s": Param(30, ge=1, doc="a flow idle this long is forgotten"),
    }
    sees_flows = True

    def __init__(self, fabric, params=None):
        super().__init__(fabric, params)
        self.counters = {"hot_links_relieved": 0}

    @staticmethod
    def inner(src, path, dst):
        """The switch-to-switch links of a path (host links are common to every choice)."""
        return path_links(src, path, dst)[1:-1]

    def flow_started(self, now, flow, obs: Observation):
        paths = obs.paths.equal_cost_paths(flow.src, flow.dst)
        if not paths:
            return None
        best = min(paths, key=lambda p: max((obs.utilization(*ln) for ln in self.inner(flow.src, p, flow.dst)),
                                            default=0.0))
        return Placement(flow.key, best, reason="least-loaded path now")

    def poll(self, now, obs: Observation):
        # What the watched flows put on each link, from their own counters.
        load: dict = {}
        on: dict = {}
        for f in obs.flows.values():
            if f.path is None:
                continue
            for ln in self.inner(f.src, f.path, f.dst):
                load[ln] = load.get(ln, 0.0) + f.rate_gbps
                on.setdefault(ln, []).append(f)
        moves = []
        for _ in range(self.params.moves_per_poll):
            hot = max(load, key=lambda ln: load[ln] / obs.capacity_gbps(*ln), default=None)
            if hot is None or load[hot] <= self.params.hot_fraction * obs.capacity_gbps(*hot):
                break
            f = max(on[hot], key=lambda f: (f.rate_gbps, -f.flow_id))
            here = self.inner(f.src, f.path, f.dst)

            def peak(p):  # the busiest link of p once f moved there
                return max((load.get(ln, 0.0) + (0 if ln in here else f.rate_gbps)) / obs.capacity_gbps(*ln)
                           for ln in self.inner(f.src, p, f.dst))
            best = min(obs.paths.equal_cost_paths(f.src, f.dst), key=peak)
            if peak(best) >= load[hot] / obs.capacity_gbps(*hot):
                break  # nowhere better: leave it
            for ln in here:
                load[ln] -= f.rate_gbps
                on[ln].remove(f)
            for ln in self.inner(f.src, best, f.dst):
                load[ln] = load.get(ln, 0.0) + f.rate_gbps
                on.setdefault(ln, []).append(f)
            moves.append(Placement(f.key, best, reason=f"hot link {hot[0]}-{hot[1]}"))
            self.counters["hot_links_relieved"] += 1
        return moves
