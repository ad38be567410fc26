"""The policy API: what a routing or co-scheduling policy sees and what it decides.

A policy is a class over the fabric graph. An engine (the Ryu adapter of the
emulator, or the flow-level engine) calls its hooks with the time ``now`` and
an ``Observation``; the hooks return decisions. A policy never sends anything
and imports no framework, so one object runs on both engines and in a unit
test (``controller.testing``).

Hooks (every one optional; the defaults are ECMP and "go now"):

- ``forwarding(now, obs) -> Forwarding``: base forwarding, the ports a packet may
  leave each switch by toward each destination host. Several ports mean ECMP:
  each flow's five-tuple is hashed over them. Called at start and after every
  link change.
- ``flow_started(now, flow, obs) -> Placement | None``: a flow the engine has not
  seen (only for policies with ``sees_flows = True``). A ``Placement`` puts it on
  a path (and a queue); ``Placement(flow.key, None)`` leaves it to base forwarding
  but watched; ``None`` leaves it alone, untracked.
- ``poll(now, obs) -> list[Placement]``: every ``poll_s``, with fresh link loads and
  flow rates in ``obs``: the flows to move.
- ``links_changed(now, obs) -> list[Placement]``: a link went down or up (``obs.links_down``);
  called after ``forwarding``. The default sends placed flows that cross a dead
  link back to base forwarding.
- ``flow_ended(now, flow, obs)``: the engine forgot a flow (idle, or finished).
- ``announce(now, ann, obs) -> Answer``: a job announced its next communication phase
  (only for policies with ``coschedules = True``; the others answer "go now").
- ``state(now, obs) -> dict``: anything worth showing in ``controller-state.json``.

Units: rates in real-cluster Gb/s (the engine divides any emulation scale out);
seconds on the engine's clock (wall-clock seconds in the emulator, simulated
seconds in the flow engine); announcements in the engine's bytes and seconds
(``obs.link_scale`` converts link rates to them).

Which path does a flow take? ``path_of(flow_key, src, dst, placements, forwarding,
paths)``: its placement's path if it has one, else a walk of base forwarding
that hashes at every switch with a choice. The walk costs one dictionary look-up
per hop once the destination's distances are known (one breadth-first search per
destination switch, in C, cached), so an engine can ask it for every flow of a
65,536-host fabric. ``Observation.paths`` is the structure to walk.
"""
from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, ClassVar

from controller.cosched import Announcement, Answer  # noqa: F401  (part of the API)
from controller.params import Param, Params, resolve
from controller.paths import ShortestPaths, five_tuple_hash, path_links  # noqa: F401  (part of the API)
from controller.rules import ETH_IPV4, IPPROTO_TCP, IPPROTO_UDP
from topologies.fabric import Fabric

API_VERSION = 1


class PolicyError(RuntimeError):
    """A policy returned a decision the engine cannot carry out: a bug in the policy."""


@dataclass(frozen=True)
class FlowKey:
    """A flow's five-tuple."""
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
class Flow:
    """A flow the engine watches, as the policy sees it. Read it; the engine changes it
    when it carries out a decision (path, moved_at_s) or measures (bytes, rate_gbps)."""
    flow_id: int
    key: FlowKey
    src: str  # host names
    dst: str
    path: tuple[str, ...] | None  # switches; None: base forwarding hashes it
    placed_at_s: float
    moved_at_s: float | None = None  # None: never moved
    job: str | None = None
    queue: int | None = None
    bytes: int = 0
    rate_gbps: float = 0.0  # real-cluster units
    measured: bool = False  # rate_gbps comes from two samples of its counter
    # The reverse direction of a connection the engine already knew (its ACKs, mostly).
    reply: bool = False


@dataclass(frozen=True)
class Placement:
    """A decision: put flow ``key`` on ``path`` (switches from the source host's switch to
    the destination host's), or back on base forwarding (path None). A move keeps the
    flow's job and queue unless it names new ones."""
    key: FlowKey
    path: tuple[str, ...] | None
    queue: int | None = None
    job: str | None = None
    reason: str = ""

    def __post_init__(self):
        if self.path is not None:
            object.__setattr__(self, "path", tuple(self.path))


class Forwarding:
    """Base forwarding: at each switch, toward each destination host, the ports a packet
    may leave by. One port: it goes there; several: ECMP, the engine hashes each flow's
    five-tuple over them; (): it is dropped (unreachable)."""

    def ports(self, switch: str, dst: str) -> tuple[int, ...]:
        raise NotImplementedError

    def switch_table(self, switch: str, hosts) -> list[tuple[str, tuple[int, ...]]]:
        """(host, ports) for every destination host at one switch: what a switch's routes
        hold. Override it when a whole table is cheaper than its entries one by one."""
        return [(h, self.ports(switch, h)) for h in hosts]


class EcmpForwarding(Forwarding):
    """Every shortest path: all the ports toward the destination's switch (ECMP)."""

    def __init__(self, paths: ShortestPaths):
        self.paths = paths

    def ports(self, switch: str, dst: str) -> tuple[int, ...]:
        at = self.paths.attach.get(dst)
        if at is None:
            return ()
        if at[0] == switch:
            return (at[1],)
        return self.paths.ports(switch, at[0]) or ()

    def switch_table(self, switch: str, hosts) -> list[tuple[str, tuple[int, ...]]]:
        if type(self).ports is not EcmpForwarding.ports:  # a subclass changed ports(): ask it
            return Forwarding.switch_table(self, switch, hosts)
        return self._ecmp_table(switch, hosts)

    def _ecmp_table(self, switch: str, hosts) -> list[tuple[str, tuple[int, ...]]]:
        # Hosts behind one switch share its port set: look it up once per switch.
        attach, ports, memo, out = self.paths.attach, self.paths.ports, {}, []
        for h in hosts:
            at = attach.get(h)
            if at is None:
                out.append((h, ()))
            elif at[0] == switch:
                out.append((h, (at[1],)))
            else:
                ps = memo.get(at[0])
                if ps is None:
                    ps = memo[at[0]] = ports(switch, at[0]) or ()
                out.append((h, ps))
        return out


class ShortestForwarding(EcmpForwarding):
    """One shortest path per (switch, destination host): of the ECMP ports, the one a
    stable hash of the switch's dpid and the host's rank picks, which spreads
    destinations over the equal-cost next hops."""

    def __init__(self, paths: ShortestPaths):
        super().__init__(paths)
        nodes = paths.fabric.graph.nodes
        self._dpid = {s: nodes[s]["dpid"] for s in paths.switches}
        self._rank = {h: nodes[h]["rank"] for h in paths.attach}

    def ports(self, switch: str, dst: str) -> tuple[int, ...]:
        return self._one(switch, dst, super().ports(switch, dst))

    def switch_table(self, switch: str, hosts) -> list[tuple[str, tuple[int, ...]]]:
        if type(self).ports is not ShortestForwarding.ports:
            return Forwarding.switch_table(self, switch, hosts)
        return [(h, self._one(switch, h, ps)) for h, ps in self._ecmp_table(switch, hosts)]

    def _one(self, switch: str, dst: str, ports: tuple[int, ...]) -> tuple[int, ...]:
        if len(ports) > 1:
            # A stable hash: Python's str hash is salted per process.
            ports = (ports[zlib.crc32(f"{self._dpid[switch]}:{self._rank[dst]}".encode()) % len(ports)],)
        return ports


class SprayForwarding(EcmpForwarding):
    """Spray over the equal-cost paths: the same ports as ECMP, but every packet picks one
    anew, so a flow's bytes split evenly over its paths (no flow hashes onto one). The packet
    engine executes it per packet; the flow engine splits each flow evenly over its paths; the
    emulator refuses it (an OVS select group hashes per flow)."""

    sprays = True


class TableForwarding(Forwarding):
    """Base forwarding from an explicit table {(switch, destination host): ports}, for static
    policies that compute it once; pairs not in the table fall back to ``default``."""

    def __init__(self, table: Mapping, default: Forwarding | None = None):
        self.table = {k: tuple(v) for k, v in table.items()}
        self.default = default

    def ports(self, switch: str, dst: str) -> tuple[int, ...]:
        got = self.table.get((switch, dst))
        if got is None:
            return self.default.ports(switch, dst) if self.default is not None else ()
        return got


class Loads:
    """Per-link loads as the engine measures them (the emulator: an EWMA of port
    counters; the flow engine: the model's rates). ``capacity_gbps[(a, b)]`` per direction.
    ``version`` changes whenever a load does (None: unknown), so policies may cache."""
    capacity_gbps: Mapping
    version: int | None = None

    def load(self, a: str, b: str) -> float:
        raise NotImplementedError

    def utilization(self, a: str, b: str) -> float:
        return self.load(a, b) / self.capacity_gbps[a, b]

    def nonzero(self):
        """((a, b), Gb/s) of the links that carry load (all of them, at worst)."""
        return ((ln, self.load(*ln)) for ln in self.capacity_gbps)


class Observation:
    """What the engine knows at ``now``, read-only: the fabric, the links down, the shortest
    paths around them, base forwarding, link loads (real Gb/s) and the watched flows."""

    def __init__(self, now: float, fabric: Fabric, paths: ShortestPaths, loads: Loads,
                 flows: Mapping | None = None, forwarding: Forwarding | None = None,
                 link_scale: float = 1.0, stats_at_s: float | None = None, flows_version: int | None = None):
        self.now = now
        self.fabric = fabric
        self.paths = paths
        self.loads = loads
        self.flows: Mapping[FlowKey, Flow] = flows if flows is not None else {}
        self.forwarding = forwarding
        self.link_scale = link_scale  # the engine's link rate / the real one (1 in the flow engine)
        self.stats_at_s = stats_at_s  # when the newest counters were read
        # Changes whenever the engine changes a watched flow (measures it, moves it, forgets
        # it), but not when it adds one: a policy may keep what it derived from the flows it
        # has seen, and add the new ones (None: unknown, derive afresh).
        self.flows_version = flows_version

    @property
    def links_down(self) -> frozenset:
        return self.paths.down

    def load_gbps(self, a: str, b: str) -> float:
        return self.loads.load(a, b)

    def utilization(self, a: str, b: str) -> float:
        return self.loads.utilization(a, b)

    def capacity_gbps(self, a: str, b: str) -> float:
        return self.loads.capacity_gbps[a, b]


class Policy:
    """Base class of every policy: declare ``PARAMS``, override the hooks you need.

    ``PARAMS`` maps names to ``Param``s (default, type, range); the engine reads three of
    them when a policy declares them: ``poll_s`` (how often ``poll`` runs, default 0.5),
    ``tau_s`` (the time constant of the link-load average, default 1) and
    ``idle_timeout_s`` (a watched flow idle that long is forgotten, default 30).
    """

    PARAMS: ClassVar[Mapping[str, Param]] = {}
    sees_flows: ClassVar[bool] = False    # flow_started is called for every new flow
    sprays: ClassVar[bool] = False        # its base forwarding is a SprayForwarding (engines that cannot spray refuse it)
    # The base forwarding the policy is, alone (no placement, move or answer ever changes a path),
    # or None: an engine may then stand a table router of that type in for the policy's object.
    static_forwarding: ClassVar[type | None] = None
    coschedules: ClassVar[bool] = False   # jobs announce their phases; announce answers them
    name: str = ""                        # what the registry calls it (set when it loads the class)

    def __init__(self, fabric: Fabric, params: Mapping | None = None):
        self.fabric = fabric
        self.params: Params = resolve(type(self).PARAMS, params)
        self.counters: dict[str, int] = {}

    # -- hooks ---------------------------------------------------------------
    def forwarding(self, now: float, obs: Observation) -> Forwarding:
        return EcmpForwarding(obs.paths)

    def flow_started(self, now: float, flow: Flow, obs: Observation) -> Placement | None:
        return None

    def poll(self, now: float, obs: Observation) -> list[Placement]:
        return []

    def links_changed(self, now: float, obs: Observation) -> list[Placement]:
        down = obs.links_down
        return [Placement(f.key, None, reason="link down: back to base forwarding")
                for f in obs.flows.values()
                if f.path is not None and any(frozenset(ln) in down for ln in path_links(f.src, f.path, f.dst))]

    def flow_ended(self, now: float, flow: Flow, obs: Observation) -> None:
        return None

    def announce(self, now: float, ann: Announcement, obs: Observation) -> Answer:
        """With ``coschedules``: the answer to a job's announced phase. The engine moves the
        job's open flows onto ``Answer.placements``; new ones are ``flow_started``'s to place."""
        return Answer(ann.job)

    def state(self, now: float, obs: Observation) -> dict:
        return {}

    # -- what the engine reads -------------------------------------------------
    def setting(self, name: str, default):
        """A param the engine reads, or its default when the policy does not declare it."""
        return self.params[name] if name in self.params else default

    def describe(self) -> dict:
        return {"policy": self.name or f"{type(self).__module__}:{type(self).__qualname__}",
                "params": self.params.to_dict()}


def path_of(key: FlowKey, src: str, dst: str, placements: Mapping, forwarding: Forwarding,
            paths: ShortestPaths, choose: Callable[[FlowKey, str, tuple], int] | None = None,
            ) -> tuple[str, ...] | None:
    """The switches a flow crosses: its placement's path, else a walk of base forwarding.

    ``placements`` maps FlowKey -> path (or a Flow with .path); ``choose(key, switch, ports)``
    picks one of several ports (default: ``ecmp_choice``, the hash the fake network uses).
    None when base forwarding drops it or loops."""
    placed = placements.get(key)
    if placed is not None:
        p = getattr(placed, "path", placed)
        if p is not None:
            return tuple(p)
    at_s, at_d = paths.attach.get(src), paths.attach.get(dst)
    if at_s is None or at_d is None:
        return None
    choose = choose or ecmp_choice(paths)
    node, out = at_s[0], [at_s[0]]
    while node != at_d[0]:
        ports = forwarding.ports(node, dst)
        if not ports:
            return None
        port = ports[0] if len(ports) == 1 else choose(key, node, ports)
        node = paths.neighbor(node, port)
        if node in out:
            return None
        out.append(node)
    return tuple(out)


def ecmp_choice(paths: ShortestPaths) -> Callable[[FlowKey, str, tuple], int]:
    """A select group's choice: the five-tuple hash salted by the switch's dpid, modulo the ports."""
    nodes = paths.fabric.graph.nodes

    def choose(key: FlowKey, switch: str, ports: tuple) -> int:
        h = five_tuple_hash(key.src_ip, key.dst_ip, key.proto, key.sport, key.dport, nodes[switch]["dpid"])
        return ports[h % len(ports)]
    return choose
