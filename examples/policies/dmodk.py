"""D-mod-K on fat-trees: a static policy, written only against dtnet's public policy API.

Destination-modulo-k routing (Zahavi et al.) picks one uplink per destination:
an edge switch sends traffic for host d up its uplink d mod (k/2), an
aggregation switch up its uplink (d / (k/2)) mod (k/2); the way down is the
only one. Every destination is then reached through one core, each core
serves a disjoint set of destinations per pod, and a shift permutation such
as Hedera's stride(n/2) crosses no link twice, where ECMP hashing collides.
"""
from __future__ import annotations

from controller.params import Param
from controller.policy import EcmpForwarding, Forwarding, Observation, Policy


class DModKForwarding(EcmpForwarding):
    """Of the equal-cost (ECMP) ports toward a destination, the one its number picks."""

    def __init__(self, paths, half: int):
        super().__init__(paths)
        self.half = half
        nodes = paths.fabric.graph.nodes
        self.rank = {h: nodes[h]["rank"] for h in paths.attach}
        self.layer = {s: nodes[s]["layer"] for s in paths.switches}

    def ports(self, switch: str, dst: str) -> tuple[int, ...]:
        ports = super().ports(switch, dst)
        if len(ports) <= 1:
            return ports
        d = self.rank[dst]
        digit = d if self.layer[switch] == "edge" else d // self.half
        # With a link down, the survivors share the destinations modulo their number.
        return (ports[digit % len(ports)],)


class DModK(Policy):
    """One path per destination, chosen by its number: no hashing, no state."""
    PARAMS = {"poll_s": Param(0.5, gt=0, doc="how often link loads are read (for controller-state.json)")}

    def __init__(self, fabric, params=None):
        super().__init__(fabric, params)
        if fabric.kind != "fat-tree":
            raise ValueError(f"D-mod-K routes fat-trees; this fabric is a {fabric.kind}")
        self.half = fabric.params["k"] // 2

    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return DModKForwarding(obs.paths, self.half)
