"""A harness for testing policies without a switch: the fake network, connected, and a closed loop.

A user's policy test is about ten lines::

    from controller.testing import Sim
    from topologies import fat_tree

    def test_my_policy_spreads_a_stride():
        sim = Sim(fat_tree(4), "mymod:MyPolicy")          # every switch connected, routes installed
        flows = [sim.start(f"h{i}", f"h{(i + 8) % 16}", gbps=400) for i in range(16)]
        sim.step()                                         # carry traffic for 0.5 s, report counters, poll
        sim.step()
        assert max(sim.link_flows(fabric_only=True).values()) == 1   # no two flows share a fabric link

``Sim`` carries every started flow along the path the fake switches give it
(following the installed flow and group tables hop by hop, hashing select
groups by five-tuple), counts the bytes on the links it crosses, and reports
them to the controller as port and flow statistics, as the switches would.
With ``wire=True`` every rule operation goes through Ryu's own OpenFlow
encoder and parser on its way to the fake switches (``controller.ofwire``),
so the adapter's encoding is under test too.
"""
from __future__ import annotations

import json
from collections import defaultdict

from controller.core import FabricController
from controller.fakeof import CONTROLLER, DELIVERED, DROPPED, LOOP, FakeNetwork, Trace  # noqa: F401
from controller.policy import FlowKey, Policy, PolicyError
from controller.registry import DEFAULT_POLICY
from topologies.fabric import Fabric

GBPS = 1e9 / 8  # bytes per second at 1 Gb/s

__all__ = ["GBPS", "FakeNetwork", "FabricController", "Sim", "Trace", "apply", "connect_all", "restart",
           "held", "delivered_pairs"]


def apply(net: FakeNetwork, plan, wire: bool = False, check=None) -> None:
    """Apply a plan stage by stage (as the adapter does, a barrier between stages); with
    ``check``, call it after every single operation."""
    if wire:
        from controller.ofwire import through_the_wire
        plan = [through_the_wire(stage, net) for stage in plan]
    for stage in plan:
        if check is None:
            net.apply(stage)
            continue
        for op in stage:
            net.apply([op])
            check()


def connect_all(ctl: FabricController, net: FakeNetwork, now: float = 0.0, wire: bool = False,
                held_state: bool = False, check=None) -> None:
    """Every switch connects in dpid order and installs what the controller sends it.
    ``held_state``: the controller reads back what each switch holds first (a resync)."""
    for name, st in sorted(ctl.switches.items(), key=lambda kv: kv[1].dpid):
        apply(net, ctl.switch_connected(st.dpid, now, held(net, name) if held_state else None), wire, check)
        ctl.install_done(st.dpid, now + 0.1)


def held(net: FakeNetwork, switch: str) -> tuple[list, list]:
    """What one fake switch holds: (flow rules, group rules), as the adapter reads them back."""
    fs = net.switches[switch]
    return list(fs.flows.values()), list(fs.groups.values())


def restart(fabric: Fabric, net: FakeNetwork, policy: str | Policy = DEFAULT_POLICY, params=None, down=(),
            check=None, now: float = 10.0, wire: bool = False) -> FabricController:
    """A new controller process: it learns the links that died meanwhile from the
    switches' port states (as the adapter feeds them), then resynchronizes every
    switch from what it holds. ``check`` runs after every single operation."""
    ctl = FabricController(fabric, policy, params)
    for name, st in sorted(ctl.switches.items(), key=lambda kv: kv[1].dpid):
        for a, b in down:
            if name in (a, b):
                apply(net, ctl.port_status(st.dpid, fabric.port(name, b if name == a else a), False, now), wire)
        apply(net, ctl.switch_connected(st.dpid, now, held(net, name)), wire, check)
        ctl.install_done(st.dpid, now)
    return ctl


def delivered_pairs(net: FakeNetwork, sources=None) -> dict:
    """(src, dst) -> True when every path the groups allow delivers (copies to the
    controller aside); raises on a loop."""
    out = {}
    hosts = net.fabric.hosts
    for src in sources or hosts:
        for dst in hosts:
            if src == dst:
                continue
            traces = [t for t in net.all_traces(src, dst) if t.outcome != CONTROLLER]
            if any(t.outcome == LOOP for t in traces):
                raise AssertionError(f"loop from {src} to {dst}: {traces}")
            out[src, dst] = bool(traces) and all(t.delivered for t in traces)
    return out


class Sim:
    """A closed loop of simulated load: a controller, the fake network, and flows at fixed rates.

    ``policy`` is a registry name or a Policy object; ``params`` its params. Time starts at 0
    and moves only in ``step``.
    """

    def __init__(self, fabric: Fabric, policy: str | Policy = "congestion-aware", link_scale: float = 1.0,
                 wire: bool = False, **params):
        self.fabric = fabric
        self.wire = wire
        self.ctl = FabricController(fabric, policy, params or None, link_scale=link_scale)
        self.net = FakeNetwork(fabric)
        self.now = 0.0
        connect_all(self.ctl, self.net, self.now, wire)
        self.link_scale = link_scale
        self.tx = defaultdict(int)
        self.rx = defaultdict(int)
        self.flow_bytes = defaultdict(int)
        self.rates: dict[FlowKey, tuple] = {}  # key -> (src, dst, sport, offered Gb/s)

    @property
    def policy(self) -> Policy:
        return self.ctl.policy

    def apply(self, plan) -> None:
        apply(self.net, plan, self.wire)

    def key(self, src: str, dst: str, sport: int = 40000, dport: int = 5000) -> FlowKey:
        return FlowKey(self.fabric.node(src)["ip"], self.fabric.node(dst)["ip"], 6, sport, dport)

    def start(self, src: str, dst: str, gbps: float, sport: int = 40000, dport: int = 5000) -> FlowKey:
        """A TCP flow from src to dst at ``gbps`` (real-cluster Gb/s). For a policy that
        watches flows, its first packet reaches the controller, which places it."""
        key = self.key(src, dst, sport, dport)
        if self.ctl.sched is not None:
            traces = self.net.all_traces(src, dst, sport=sport, dport=dport)
            assert any(t.outcome == CONTROLLER for t in traces), f"{key}: its first packet never reaches the controller"
            sw, port = self.fabric.attachment(src)
            self.apply(self.ctl.packet_in_flow(self.fabric.node(sw)["dpid"], port, key, self.now))
        self.rates[key] = (src, dst, sport, gbps)
        return key

    def stop(self, key: FlowKey) -> None:
        """The flow sends no more (its entries idle out later, as on a switch)."""
        self.rates.pop(key)

    def trace(self, key: FlowKey) -> Trace:
        """Where the flow's packets go now."""
        src, dst, _, _ = self.rates[key]
        return self.net.trace(src, dst, sport=key.sport, dport=key.dport)

    def path(self, key: FlowKey) -> Trace:
        """The flow's trace, which must be delivered."""
        t = self.trace(key)
        assert t.delivered, t
        return t

    def flow(self, key: FlowKey):
        """The controller's record of a watched flow (path, job, rate_gbps, ...), or None."""
        return self.ctl.sched.flows.get(key) if self.ctl.sched is not None else None

    def step(self, dt: float = 0.5):
        """Carry every flow for dt, report counters, let the policy poll; returns the plan it made."""
        for key, (src, dst, sport, gbps) in self.rates.items():
            t = self.path(key)
            nbytes = int(gbps * GBPS * dt * self.link_scale)
            for a, b in t.links:
                if self.fabric.node(a)["role"] == "switch":
                    self.tx[a, self.fabric.port(a, b)] += nbytes
                else:
                    self.rx[b, self.fabric.port(b, a)] += nbytes
            self.flow_bytes[key] += nbytes
        self.now += dt
        for sw, st in self.ctl.switches.items():
            ports = sorted({p for (s, p) in list(self.tx) + list(self.rx) if s == sw})
            self.ctl.port_stats(st.dpid, [(p, self.tx[sw, p], self.rx[sw, p]) for p in ports], self.now)
            if self.ctl.sched is not None:
                entries = [(f.cookie, self.flow_bytes[f.key]) for f in self.ctl.sched.flows.values()
                           if f.ingress == sw]
                self.ctl.flow_stats(st.dpid, entries, self.now)
        plan = self.ctl.poll_done(self.now)
        self.apply(plan)
        return plan

    def set_link(self, a: str, b: str, up: bool) -> None:
        """A cable goes down (or up): both ends report it, the controller reroutes. A policy
        whose links_changed raised makes this raise too (the routes went out regardless)."""
        self.net.set_link(a, b, up)
        failed = len(self.ctl.failures)
        for node, peer in ((a, b), (b, a)):
            if node in self.ctl.switches:
                dpid = self.fabric.node(node)["dpid"]
                self.apply(self.ctl.port_status(dpid, self.fabric.port(node, peer), up, self.now))
        if len(self.ctl.failures) > failed:
            raise PolicyError(f"links_changed failed: {self.ctl.failures[-1]['error']}")

    def announce(self, job: str, flows, period_s: float = 1.0, **fields) -> dict:
        """POST an announcement (flows: (src, dst, size_bytes)); returns the 200 answer."""
        body = {"version": 1, "job": job, "collective": "all_reduce", "period_s": period_s,
                "flows": [{"src": s, "dst": d, "size_bytes": b} for s, d, b in flows], **fields}
        code, answer = self.ctl.announce(json.dumps(body).encode(), self.now)
        assert code == 200, answer
        self.apply(self.ctl.take_announce_plan())  # the job's open flows move, as the engines do it
        return answer

    def link_flows(self, fabric_only: bool = False) -> dict:
        """Directed link -> how many started flows cross it (switch-to-switch links only
        with ``fabric_only``)."""
        per = defaultdict(int)
        for key in self.rates:
            for ln in self.path(key).links:
                if not fabric_only or all(self.fabric.node(n)["role"] == "switch" for n in ln):
                    per[ln] += 1
        return per

    def state(self) -> dict:
        """What controller-state.json would hold now."""
        return self.ctl.state(self.now)
