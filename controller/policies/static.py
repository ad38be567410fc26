"""Static base forwarding: ``ecmp`` (every shortest path, hashed), ``shortest`` (one per destination)
and ``spray`` (every shortest path, per packet)."""
from __future__ import annotations

from badinput.limits import POLL_S
from controller.params import Param
from controller.policy import EcmpForwarding, Forwarding, Observation, Policy, ShortestForwarding, SprayForwarding

# The engine polls port counters for every policy: controller-state.json shows link loads.
OBSERVE_PARAMS = {
    # 1 ms at least: a poll period near 0 stops a simulated clock from advancing (badinput.limits).
    "poll_s": Param(0.5, ge=POLL_S.lo, le=POLL_S.hi, doc="statistics poll period (controller clock)"),
    "tau_s": Param(1.0, ge=POLL_S.lo, le=POLL_S.hi, doc="time constant of the link-load moving average"),
}


class Ecmp(Policy):
    """Every shortest path of every pair, as one select group per port set: each switch
    hashes each flow's five-tuple over its equal-cost next hops."""
    PARAMS = OBSERVE_PARAMS
    static_forwarding = EcmpForwarding

    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return EcmpForwarding(obs.paths)


class Shortest(Policy):
    """One shortest path per (switch, destination host), spread over the equal-cost next
    hops by a stable hash of the switch and the destination."""
    PARAMS = OBSERVE_PARAMS
    static_forwarding = ShortestForwarding

    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return ShortestForwarding(obs.paths)


class Spray(Policy):
    """Per-packet spraying over every shortest path of every pair: each switch sends each
    packet out of any of its equal-cost next hops, so a flow's load splits evenly over its
    paths. Engines that forward per flow (the emulator's OVS) refuse it."""
    PARAMS = OBSERVE_PARAMS
    sprays = True

    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return SprayForwarding(obs.paths)
