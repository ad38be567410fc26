"""The controller's state machine, free of any framework (faucet's Valve, in small).

The Ryu adapter hands it events with the time they happened and sends what
it returns. Everything here is testable against ``controller.fakeof``.

An install plan is a list of stages; each stage is a list of rule operations.
The adapter sends a stage, waits for a barrier reply from every switch it
touched, and only then sends the next stage: that is what makes an install
(or a reroute) ordered across switches.
"""
from __future__ import annotations

from dataclasses import dataclass

from controller.routing import NextHops, check_policy, switch_routes
from controller.rules import GROUP_ALL, FlowDelete, GroupDelete
from topologies.fabric import Fabric

Plan = list  # list[list[op]]: stages, a barrier between each


@dataclass
class SwitchState:
    name: str
    dpid: int
    connected: bool = False
    ready: bool = False
    connected_at_s: float | None = None
    ready_at_s: float | None = None
    errors: int = 0


@dataclass(frozen=True)
class ArpReply:
    """What to send back out of ``port`` of ``switch``: target_ip is at target_mac."""
    switch: str
    port: int
    target_ip: str
    target_mac: str
    requester_ip: str
    requester_mac: str


class FabricController:
    """Routing state of one fabric: which switches are up, and what they must hold."""

    def __init__(self, fabric: Fabric, routing: str = "ecmp"):
        check_policy(routing)
        self.fabric = fabric
        self.routing = routing
        self.next_hops = NextHops(fabric)
        self.switches = {s: SwitchState(s, fabric.node(s)["dpid"]) for s in fabric.openflow_switches}
        self.by_dpid = {st.dpid: st for st in self.switches.values()}
        # Only fabric addresses: NVLink addresses live on kernel bridges the
        # controller never sees.
        self.ip_to_mac = {fabric.node(h)["ip"]: fabric.node(h)["mac"] for h in fabric.hosts}
        self.counters = {"arp_replies": 0, "arp_ignored": 0, "switch_connects": 0, "switch_errors": 0}

    # -- switch lifecycle ---------------------------------------------------
    def switch_name(self, dpid: int) -> str | None:
        st = self.by_dpid.get(dpid)
        return st.name if st else None

    def switch_connected(self, dpid: int, now: float) -> Plan:
        """Wipe the switch, then install its groups, then its flows.

        Groups go in a stage before the flows because a flow may not point at a
        group the switch does not have yet.
        """
        st = self.by_dpid.get(dpid)
        if st is None:
            return []
        st.connected, st.ready, st.connected_at_s, st.ready_at_s = True, False, now, None
        self.counters["switch_connects"] += 1
        flows, groups = switch_routes(self.fabric, st.name, self.routing, self.next_hops)
        wipe = [FlowDelete(st.name), GroupDelete(st.name, GROUP_ALL)]
        return [wipe, list(groups), list(flows)]

    def install_done(self, dpid: int, now: float) -> None:
        """The last barrier of the connect plan came back."""
        st = self.by_dpid.get(dpid)
        if st is not None and st.connected and st.errors == 0:
            st.ready, st.ready_at_s = True, now

    def switch_error(self, dpid: int, now: float) -> None:
        st = self.by_dpid.get(dpid)
        self.counters["switch_errors"] += 1
        if st is not None:
            st.errors += 1
            st.ready = False

    def switch_disconnected(self, dpid: int, now: float) -> None:
        st = self.by_dpid.get(dpid)
        if st is not None:
            st.connected = st.ready = False
            st.errors = 0

    # -- packet-in ----------------------------------------------------------
    def arp_request(self, dpid: int, in_port: int, requester_ip: str, requester_mac: str,
                    target_ip: str) -> ArpReply | None:
        """Answer from the host table; unknown targets get no answer (no flooding)."""
        st = self.by_dpid.get(dpid)
        mac = self.ip_to_mac.get(target_ip)
        if st is None or mac is None:
            self.counters["arp_ignored"] += 1
            return None
        self.counters["arp_replies"] += 1
        return ArpReply(st.name, in_port, target_ip, mac, requester_ip, requester_mac)

    # -- inspection ---------------------------------------------------------
    def status(self) -> dict:
        names = sorted(self.switches, key=lambda s: self.switches[s].dpid)
        connected = [s for s in names if self.switches[s].connected]
        ready = [s for s in names if self.switches[s].ready]
        return {
            "switches_expected": len(names),
            "switches_connected": connected,
            "switches_ready": ready,
            "ready": len(ready) == len(names),
            "routing": self.routing,
            "counters": dict(self.counters),
        }
