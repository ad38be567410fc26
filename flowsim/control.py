"""The controller's own policy objects, driven by the flow model instead of OpenFlow.

``ControllerRouter`` holds a ``controller.core.FabricController`` (the framework-free state
machine the Ryu app drives) with the experiment's policy (a built-in or any
``package.module:Class``, with its resolved params), and feeds it what the Ryu app would: a
packet-in for each new connection at its ingress switch, port and per-flow byte counters
every poll, ``poll_done`` half a poll later (the Ryu app's poll loop waits half a period for
the replies), port status when a link or a switch fails, and announcements (``announce``)
from co-scheduled jobs. Where the policy places or moves a flow, the flow takes that path;
flows it does not place (NVLink peers, flows started while it is down) follow the policy's
base forwarding, as in the emulator, where unplaced TCP falls through to the destination
routes: ECMP and shortest by the vectorized routers, any other ``Forwarding`` hop by hop.

Counters are the model's: cumulative bytes per directed link and per connection, in real
bytes, with ``link_scale`` 1. Time is the simulation's; the controller's own periods
(``poll_s``, ``tau_s``, ``hold_s``) are given in its clock, which in the emulator is the wall
clock, so a run that mirrors an emulator run passes them multiplied by ``time_scale``.
"""
from __future__ import annotations

import numpy as np

from controller.core import FabricController
from controller.policy import EcmpForwarding, FlowKey, ShortestForwarding
from controller.registry import make_policy, trait
from flowsim.routing import EcmpRouter, Router, ShortestRouter, SprayRouter

CLOCK_PARAMS = ("poll_s", "tau_s", "hold_s")  # periods in the controller's clock


def needs_controller(policy: str) -> bool:
    """Whether the flow engine runs the policy's own object: every policy that is not a static
    table (Policy.static_forwarding), whatever its name."""
    return trait(policy, "static_forwarding") is None


def table_router(policy: str, seed: int) -> Router | None:
    """The vectorized router that is the policy, for a static table (by its forwarding type), else None."""
    fwd = trait(policy, "static_forwarding")
    if fwd is None:
        return None
    return ShortestRouter() if issubclass(fwd, ShortestForwarding) else EcmpRouter(seed)


def _ip(n: int) -> str:
    return f"{n >> 24 & 255}.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


class ForwardingRouter(Router):
    """A policy's own base forwarding (neither ECMP nor shortest), hop by hop: at each switch
    the ports ``Forwarding.ports(switch, dst)`` gives, one chosen by the five-tuple's hash
    when there are several (as a select group would). NVLink peers go as ECMP routes them."""

    name = "forwarding"

    def __init__(self, ctl: FabricController, seed: int = 0):
        super().__init__()
        self.ctl = ctl
        self.ecmp = EcmpRouter(seed)
        fabric = ctl.fabric
        self._peer = {}
        for a, b, d in fabric.graph.edges(data=True):
            self._peer[a, d["ports"][a]] = b
            self._peer[b, d["ports"][b]] = a

    def attach(self, sim) -> None:
        super().attach(sim)
        self.ecmp.attach(sim)

    def route(self, net, src, dst, key, conns=None):
        indptr, links = self.ecmp.route(net, src, dst, key)
        paths = [links[indptr[k]:indptr[k + 1]] for k in range(len(src))]
        src, dst, key = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(key, np.uint64)
        fabric_flow = (src != dst) & ~((net.host_nvl[src] >= 0) & (net.host_nvl[src] == net.host_nvl[dst]))
        for k in np.flatnonzero(fabric_flow).tolist():
            paths[k] = self._walk(net, int(src[k]), int(dst[k]), key[k:k + 1])
        return np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64), \
            (np.concatenate(paths) if paths else np.zeros(0, np.int64))

    def _walk(self, net, s: int, d: int, key) -> np.ndarray:
        fabric, fwd = self.ctl.fabric, self.ctl.fwd
        src, dst = net.names[net.hosts[s]], net.names[net.hosts[d]]
        sw, _ = fabric.attachment(src)
        nodes = [src, sw]
        for _ in range(len(fabric.openflow_switches) + 1):
            ports = fwd.ports(sw, dst)
            if not ports:
                return np.zeros(0, np.int64)  # the policy drops it: unreachable
            pick = int(self.ecmp.hop_choice(key, np.array([d]), np.array([net.index(sw)]))[0] % len(ports))
            nxt = self._peer.get((sw, ports[pick]))
            if nxt is None:
                return np.zeros(0, np.int64)
            nodes.append(nxt)
            if nxt == dst:
                ids = np.array([net.link(a, b) for a, b in zip(nodes, nodes[1:])], np.int64)
                return ids if net.link_up[ids].all() else np.zeros(0, np.int64)
            sw = nxt
        return np.zeros(0, np.int64)  # a loop in the policy's tables


def base_router(ctl: FabricController, seed: int) -> Router:
    """The vectorized router equal to the policy's base forwarding, or the hop-by-hop one."""
    if getattr(ctl.fwd, "sprays", False):
        return SprayRouter()
    if isinstance(ctl.fwd, ShortestForwarding):
        return ShortestRouter()
    if type(ctl.fwd) is EcmpForwarding:
        return EcmpRouter(seed)
    return ForwardingRouter(ctl, seed)


class ControllerRouter(Router):
    """Every policy but the plain tables: FabricController's placements, moves and answers."""

    def __init__(self, fabric, policy: str, params: dict | None = None, seed: int = 0, time_scale: float = 1.0,
                 outages: tuple = ()):
        """params: the policy's resolved params, in the controller's clock; time_scale
        multiplies its periods (poll_s, tau_s, hold_s); outages are (from_s, until_s) windows
        when the controller is away (a restart): no polls, no placements; at until_s a fresh
        controller starts and places the live flows again."""
        super().__init__()
        if params is None:  # the policy's defaults, so that time_scale applies to them too
            params = make_policy(policy, fabric).params.to_dict()
        self.params = {k: (v * time_scale if k in CLOCK_PARAMS else v) for k, v in dict(params).items()}
        self.fabric, self.name, self.seed = fabric, policy, int(seed)
        self.ctl = FabricController(fabric, policy, self.params, link_scale=1.0)
        self.base = base_router(self.ctl, self.seed)
        self.splits = self.base.splits
        self.poll_s = self.ctl.poll_s / 2  # stats at even polls, poll_done at odd ones
        self._tick = 0
        self.outages = sorted((float(a), float(b)) for a, b in outages)
        self.restarts = 0
        self.placed: dict[int, FlowKey] = {}   # connection -> its five-tuple, placed by the controller
        self._ports = None
        self._up = None
        self._announced: dict = {}  # connection -> links: open flows an answer moved, for the next poll

    def attach(self, sim) -> None:
        super().attach(sim)
        self.base.attach(sim)
        self._up = sim.net.link_up.copy()

    def describe(self) -> dict:
        return {"name": self.name, "seed": self.seed, "controller": "controller.core.FabricController",
                "params": dict(self.params), "base": f"{self.base.name} (unplaced flows)",
                "restarts": self.restarts}

    def timers(self) -> list[float]:
        return [b for _, b in self.outages]

    def down(self, now: float) -> bool:
        return any(a <= now < b for a, b in self.outages)

    # -- the controller's view of the model ------------------------------------
    def _switch(self, net, node: int):
        name = net.names[node]
        return name, self.fabric.node(name)["dpid"]

    def _key(self, c: int) -> FlowKey:
        sip, dip, sport, dport = self.sim.five_tuple(c)
        return FlowKey(_ip(sip), _ip(dip), 6, sport, dport)

    def _links(self, net, c: int, path: tuple) -> np.ndarray:
        nodes = [net.names[net.hosts[self.sim.C_src[c]]], *path, net.names[net.hosts[self.sim.C_dst[c]]]]
        return np.array([net.link(a, b) for a, b in zip(nodes, nodes[1:])], np.int64)

    def _place(self, net, c: int, now: float) -> np.ndarray | None:
        """The packet-in of connection c's first packet at its ingress switch; its path, or None."""
        h = self.sim.C_src[c]
        sw = int(net.host_switch[h])
        if sw < 0 or self.ctl.sched is None:  # a policy that watches no flows places none
            return None
        name, dpid = self._switch(net, sw)
        key = self._key(c)
        self.ctl.packet_in_flow(dpid, self.fabric.port(name, net.names[net.hosts[h]]), key, now)
        e = self.ctl.sched.flows.get(key)
        if e is None:
            return None
        self.placed[c] = key
        return self._links(net, c, e.path)

    def route(self, net, src, dst, key, conns=None):
        indptr, links = self.base.route(net, src, dst, key)
        if conns is None or self.sim is None or self.down(self.sim.now):
            return indptr, links
        paths = [links[indptr[k]:indptr[k + 1]] for k in range(len(src))]
        fabric = (np.asarray(src) != np.asarray(dst)) & ~((net.host_nvl[src] >= 0) & (net.host_nvl[src] == net.host_nvl[dst]))
        for k in np.flatnonzero(fabric).tolist():
            if len(paths[k]):  # reachable at all: the controller places it
                p = self._place(net, int(conns[k]), self.sim.now)
                if p is not None:
                    paths[k] = p
        return np.concatenate([[0], np.cumsum([len(p) for p in paths])]).astype(np.int64), \
            (np.concatenate(paths) if paths else np.zeros(0, np.int64))

    def _port_table(self, net):
        """Per OpenFlow switch: (dpid, ports, links out, links in) over its links to switches and hosts."""
        if self._ports is None:
            out = []
            for sw in self.fabric.openflow_switches:
                i = net.index(sw)
                ports, tx, rx = [], [], []
                for lid in np.flatnonzero(net.link_src == i).tolist():
                    peer = int(net.link_dst[lid])
                    if net.link_port[lid] < 0 or self.fabric.graph.edges[sw, net.names[peer]]["kind"] == "nvlink":
                        continue
                    ports.append(int(net.link_port[lid]))
                    tx.append(lid)
                    rx.append(net.link(peer, i))
                out.append((self.fabric.node(sw)["dpid"], ports, np.array(tx, np.int64), np.array(rx, np.int64)))
            self._ports = out
        return self._ports

    def poll(self, now, obs):
        moved, self._announced = self._announced, {}
        if self.down(now):
            return moved
        self._tick += 1
        if self._tick % 2:  # counters, as the stats replies arrive
            for dpid, ports, tx, rx in self._port_table(obs.net):
                self.ctl.port_stats(dpid, list(zip(ports, obs.link_bytes[tx].astype(np.int64).tolist(),
                                                   obs.link_bytes[rx].astype(np.int64).tolist())), now)
            if self.ctl.sched is not None:
                by_switch: dict[int, list] = {}
                nbytes = self.sim.conn_bytes()
                for c, key in self.placed.items():
                    e = self.ctl.sched.flows.get(key)
                    if e is not None:
                        dpid = self.fabric.node(e.path[0])["dpid"]
                        by_switch.setdefault(dpid, []).append((e.cookie, int(nbytes[c])))
                for dpid, stats in by_switch.items():
                    self.ctl.flow_stats(dpid, stats, now)
            return moved
        before = self._placed_paths()
        self.ctl.poll_done(now)
        return moved | self._moved(obs.net, before)

    def _placed_paths(self) -> dict[int, tuple]:
        flows = self.ctl.sched.flows if self.ctl.sched is not None else {}
        return {c: flows[k].path for c, k in self.placed.items() if k in flows}

    def _moved(self, net, before: dict) -> dict:
        after = self._placed_paths()
        return {c: self._links(net, c, p) for c, p in after.items() if before.get(c) != p}

    def links_changed(self, now, obs):
        """Port status of every port whose link changed, as the switches report it, then the
        paths: the controller's for the flows it placed, the base table's for the rest."""
        net = obs.net
        changed = np.flatnonzero(net.link_up != self._up)
        self._up = net.link_up.copy()
        if not self.down(now):
            for lid in changed.tolist():
                node = int(net.link_src[lid])
                if net.link_port[lid] >= 0 and net.names[node] in self.ctl.switches:
                    self.ctl.port_status(self.fabric.node(net.names[node])["dpid"], int(net.link_port[lid]),
                                         bool(net.link_up[lid]), now)
        paths = self._placed_paths()
        out = {}
        rest = [k for k, c in enumerate(obs.conn_ids.tolist()) if c not in paths]
        if rest:
            r = np.array(rest, np.int64)
            indptr, links = self.base.route(net, obs.conn_src[r], obs.conn_dst[r], obs.conn_key[r])
            for i, k in enumerate(rest):
                out[int(obs.conn_ids[k])] = links[indptr[i]:indptr[i + 1]]
        for c in obs.conn_ids.tolist():
            if c in paths:
                out[c] = self._links(net, c, paths[c])
        return out

    def wake(self, now, obs):
        """A restart: a new controller, which knows nothing of the old one's placements, places
        every connection again when its next packet arrives (here: at once, in connection order)."""
        if not any(abs(b - now) <= 1e-12 * max(1.0, now) for _, b in self.outages):
            return {}
        self.restarts += 1
        self.ctl = FabricController(self.fabric, self.name, self.params, link_scale=1.0)
        if isinstance(self.base, ForwardingRouter):
            self.base.ctl = self.ctl
        self._replay_faults(obs.net, now)
        before = self._placed_paths()
        self.placed = {}
        out = {}
        for c in range(len(self.sim.C_src)):
            p = self.sim.C_path[c]
            if p is None or not len(p):
                continue
            new = self._place(obs.net, c, now)
            if new is not None and before.get(c) is not None:
                out[c] = new
        return out

    def _replay_faults(self, net, now):
        """Links down when the new controller starts: its switches report them as it connects."""
        for lid in np.flatnonzero(~net.link_up).tolist():
            node = int(net.link_src[lid])
            if net.link_port[lid] >= 0 and net.names[node] in self.ctl.switches:
                self.ctl.port_status(self.fabric.node(net.names[node])["dpid"], int(net.link_port[lid]), False, now)

    def announce(self, body: dict, now: float) -> tuple[int, dict] | None:
        """The controller's answer to an announcement; None while it is away (the launcher falls back)."""
        if self.down(now):
            return None
        before = self._placed_paths()
        got = self.ctl.announce(body, now)
        self.ctl.take_announce_plan()  # no switches here: the moves are the paths below
        if self.sim is not None:
            self._announced.update(self._moved(self.sim.net, before))
        return got

    def state(self, now: float) -> dict:
        """controller-state.json, as the emulator writes it (loads, flows, decisions, jobs)."""
        return self.ctl.state(now)

    def status(self) -> dict:
        """summary.json "controller": the policy's counters (there are no switches to connect)."""
        return {"routing": self.name, "policy": {"name": self.name, "params": dict(self.params)},
                "restarts": self.restarts,
                "counters": {**(self.ctl.sched.counters if self.ctl.sched else {}), **self.ctl.policy.counters}}

