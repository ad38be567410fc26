"""The controller's state machine, free of any framework (faucet's Valve, in small).

The Ryu adapter hands it events with the time they happened and sends what
it returns. Everything here is testable against ``controller.fakeof``.

An install plan is a list of stages; each stage is a list of rule operations.
The adapter sends a stage, waits for a barrier reply from every switch it
touched, and only then sends the next stage: that is what makes an install
(or a reroute) ordered across switches.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from controller.cosched import AnnounceError, Answer, parse_announcement
from controller.flows import FlowKey, FlowTable
from controller.load import LinkLoad
from controller.paths import ShortestPaths
from controller.policy import Observation, Placement, Policy, PolicyError
from controller.registry import DEFAULT_POLICY, make_policy
from controller.routing import switch_routes
from controller.rules import COOKIE_FLOW_BASE, COOKIE_FLOW_MASK, GROUP_ALL, FlowDelete, GroupDelete
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


def _route_ports(group) -> tuple | None:
    """The port set of a group shaped like the routes' ECMP groups (select, one
    output per bucket, ports sorted); None for any other group."""
    if group.type != "select" or any(len(acts) != 1 or acts[0][0] != "output" for _, acts in group.buckets):
        return None
    ports = tuple(acts[0][1] for _, acts in group.buckets)
    return ports if ports == tuple(sorted(ports)) else None


class FabricController:
    """Routing state of one fabric: which switches are up, what they must hold, and the
    policy whose decisions it turns into rule operations.

    ``policy``: a registry name (``ecmp``, ``mypkg.mod:Mine``) or a ``Policy`` object;
    ``params`` its params (names only); ``link_scale``: emulated link rate / real rate,
    so loads and rates come out in the fabric's real-cluster Gb/s.
    """

    def __init__(self, fabric: Fabric, policy: str | Policy = DEFAULT_POLICY, params: Mapping | None = None, *,
                 link_scale: float = 1.0, routing: str | None = None):
        if routing is not None:  # the old name of the argument
            policy = routing
        self.fabric = fabric
        self.policy = policy if isinstance(policy, Policy) else make_policy(policy, fabric, params)
        self.routing = self.policy.name or self.policy.describe()["policy"]
        self.link_scale = link_scale
        self.down: set[frozenset] = set()
        self.paths = ShortestPaths(fabric)
        self.switches = {s: SwitchState(s, fabric.node(s)["dpid"]) for s in fabric.openflow_switches}
        # What each switch holds (as far as we sent it): for diffs on link changes.
        self.installed: dict[str, tuple[dict, dict]] = {}
        self.group_ids: dict[str, dict] = {s: {} for s in self.switches}
        self.load = LinkLoad(fabric, link_scale, self.policy.setting("tau_s", 1.0))
        # Policies that watch flows keep table 0 for per-flow placements and send
        # unplaced host TCP to the controller there; routes go to table 1.
        self.route_table = 1 if self.policy.sees_flows else 0
        self.announce_plan: Plan = []  # moves of open flows to announced paths, to install
        self.sched = FlowTable(fabric, self.route_table, self.policy.setting("idle_timeout_s", 30), link_scale) \
            if self.policy.sees_flows else None
        self.by_dpid = {st.dpid: st for st in self.switches.values()}
        # Only fabric addresses: NVLink addresses live on kernel bridges the
        # controller never sees.
        self.ip_to_mac = {fabric.node(h)["ip"]: fabric.node(h)["mac"] for h in fabric.hosts}
        self.counters = {"arp_replies": 0, "arp_ignored": 0, "switch_connects": 0, "switch_errors": 0,
                         "resyncs": 0, "resync_entries_kept": 0, "resync_entries_sent": 0,
                         "resync_entries_deleted": 0, "policy_errors": 0}
        self.resyncs: list[dict] = []  # one per resynchronized connect: what it found and changed
        self.last_stats_s = 0.0  # newest port-statistics reply
        self.reroutes: deque = deque(maxlen=200)  # rebalances: observed, decided, installed
        self.failures: deque = deque(maxlen=50)  # the policy's hooks that raised: when, which, what
        self._set_forwarding(0.0)

    def _set_forwarding(self, now: float) -> None:
        self.fwd = self.policy.forwarding(now, self.observation(now))
        if self.sched is not None:
            self.sched.fwd = self.fwd

    @property
    def next_hops(self) -> ShortestPaths:
        return self.paths

    @property
    def poll_s(self) -> float:
        """How often the adapter reads counters and calls the policy's poll."""
        return self.policy.setting("poll_s", 0.5)

    def observation(self, now: float) -> Observation:
        return Observation(now, self.fabric, self.paths, self.load, self.sched.flows if self.sched else {},
                           getattr(self, "fwd", None), self.link_scale, self.last_stats_s or None,
                           self.sched.version if self.sched else None)

    # -- switch lifecycle ---------------------------------------------------
    def switch_name(self, dpid: int) -> str | None:
        st = self.by_dpid.get(dpid)
        return st.name if st else None

    def switch_connected(self, dpid: int, now: float, held: tuple | None = None) -> Plan:
        """The plan that brings a (re)connected switch in line with what it must hold.

        ``held`` is what the switch holds, read back from it: (flow rules, group
        rules). Then the plan resynchronizes make-before-break: the groups and
        flows that are missing or differ, then deletion of the stale flows,
        then of the stale groups. Every packet meets either the old entry or
        the new one, never a gap: a controller restart costs no forwarding.
        Unknown (None): wipe the switch, then install groups, then flows.
        Groups always come a stage before the flows that point at them.
        """
        st = self.by_dpid.get(dpid)
        if st is None:
            return []
        st.connected, st.ready, st.connected_at_s, st.ready_at_s = True, False, now, None
        self.counters["switch_connects"] += 1
        if held is not None:
            self._adopt(st.name, *held)
        flows, groups = self._routes(st.name)
        if self.sched is not None:
            flows += [f.rules[st.name] for f in self.sched.flows.values() if st.name in f.rules]
        if held is None:
            return [[FlowDelete(st.name), GroupDelete(st.name, GROUP_ALL)], list(groups), list(flows)]
        return self._resync(st.name, flows, groups, *held, now)

    def _adopt(self, switch: str, held_flows, held_groups) -> None:
        """Keep the group ids the switch already uses for the same next hops, and
        number new per-flow placements above the ones it holds, so that a
        stale entry never shares a cookie with a new flow."""
        gids = self.group_ids[switch]
        taken = set(gids.values())
        for g in sorted(held_groups, key=lambda g: g.group_id):
            if g.group_id in taken:
                continue
            ports = _route_ports(g)
            # A group that is not one of our route groups still reserves its id.
            gids[ports if ports is not None and ports not in gids else ("held", g.group_id)] = g.group_id
            taken.add(g.group_id)
        if self.sched is not None:
            ids = [r.cookie - COOKIE_FLOW_BASE for r in held_flows
                   if r.cookie & COOKIE_FLOW_MASK == COOKIE_FLOW_BASE & COOKIE_FLOW_MASK]
            self.sched.reserve_ids(max(ids, default=0))

    def _resync(self, switch: str, flows, groups, held_flows, held_groups, now: float) -> Plan:
        have_f = {r.key: r for r in held_flows}
        have_g = {g.group_id: g for g in held_groups}
        want_f = {r.key for r in flows}
        want_g = {g.group_id for g in groups}
        add_g = [g for g in groups if have_g.get(g.group_id) != g]
        add_f = [r for r in flows if have_f.get(r.key) != r]
        del_f = [FlowDelete(switch, r.match, r.priority, strict=True, table=r.table)
                 for k, r in have_f.items() if k not in want_f]
        del_g = [GroupDelete(switch, gid) for gid in have_g if gid not in want_g]
        kept = len(flows) + len(groups) - len(add_f) - len(add_g)
        self.counters["resyncs"] += 1
        self.counters["resync_entries_kept"] += kept
        self.counters["resync_entries_sent"] += len(add_f) + len(add_g)
        self.counters["resync_entries_deleted"] += len(del_f) + len(del_g)
        self.resyncs.append({"time_s": now, "switch": switch, "held_flows": len(have_f), "held_groups": len(have_g),
                             "kept": kept, "sent": len(add_f) + len(add_g), "deleted": len(del_f) + len(del_g)})
        return [stage for stage in (add_g, add_f, del_f, del_g) if stage]

    def _routes(self, switch: str) -> tuple[list, list]:
        flows, groups = switch_routes(self.fabric, switch, self.fwd, self.route_table, self.paths,
                                      self.group_ids[switch])
        self.installed[switch] = ({r.key: r for r in flows}, {g.group_id: g for g in groups})
        return flows, groups

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

    # -- links --------------------------------------------------------------
    def port_status(self, dpid: int, port: int, up: bool, now: float) -> Plan:
        """A port changed state: route around the link (or back onto it)."""
        st = self.by_dpid.get(dpid)
        peer = self.load.peer(st.name, port) if st else None
        if peer is None:
            return []
        link = frozenset((st.name, peer))
        if (link in self.down) != up:
            return []  # no change
        (self.down.discard if up else self.down.add)(link)
        self.paths = ShortestPaths(self.fabric, frozenset(self.down))
        self._set_forwarding(now)
        stages: list[list] = [[], [], [], []]
        for sw, state in self.switches.items():
            if not state.connected:
                continue
            old_flows, old_groups = self.installed.get(sw, ({}, {}))
            flows, groups = self._routes(sw)
            new_flows = {r.key: r for r in flows}
            new_groups = {g.group_id: g for g in groups}
            stages[0] += [g for gid, g in new_groups.items() if old_groups.get(gid) != g]
            stages[1] += [r for k, r in new_flows.items() if old_flows.get(k) != r]
            stages[2] += [FlowDelete(sw, r.match, r.priority, strict=True, table=r.table)
                          for k, r in old_flows.items() if k not in new_flows]
            stages[3] += [GroupDelete(sw, gid) for gid in old_groups if gid not in new_groups]
        if self.sched is not None:
            try:
                moves = self._checked(self.policy.links_changed(now, self.observation(now)))
            except Exception as e:  # the routes above must still go out: they are installed already
                self.policy_failed(now, "links_changed", e)
                moves = []
            for i, ops in enumerate(self.sched.move(moves, now)):
                stages[1 + min(i, 2)] += ops
        return [s for s in stages if s]

    def policy_failed(self, now: float, hook: str, error: Exception) -> None:
        """A policy hook raised: count it and keep what it said (state's policy_failures)."""
        self.counters["policy_errors"] += 1
        self.failures.append({"time_s": now, "hook": hook, "error": f"{type(error).__name__}: {error}"[:300]})

    # -- flows ----------------------------------------------------------------
    def packet_in_flow(self, dpid: int, in_port: int, key: FlowKey, now: float) -> Plan:
        """A host's TCP packet with no placement: ask the policy where its flow goes."""
        if self.sched is None or dpid not in self.by_dpid or key in self.sched.flows:
            return []
        src, dst = self.sched.ip_to_host.get(key.src_ip), self.sched.ip_to_host.get(key.dst_ip)
        if src is None or dst is None or src == dst or src not in self.paths.attach:
            return []
        flow = self.sched.new_entry(key, src, dst, now)
        p = self.policy.flow_started(now, flow, self.observation(now))
        if p is None:
            return []
        if p.key != key:
            raise PolicyError(f"{self.routing}: flow_started({key}) answered for another flow, {p.key}")
        self._check(p, src, dst)
        return self.sched.place(flow, p, self.paths.attach[src][0], now)

    def _check(self, p: Placement, src: str, dst: str) -> None:
        """A placement's path must run from src's switch to dst's over live links."""
        if p.path is None:
            return
        path, name = p.path, self.routing
        if not path or path[0] != self.paths.attach[src][0] or dst not in self.paths.attach or \
                path[-1] != self.paths.attach[dst][0]:
            raise PolicyError(f"{name}: flow {p.key}: path {list(path)} does not run from {src}'s switch "
                              f"to {dst}'s")
        for a, b in zip(path, path[1:]):
            if a not in self.switches or b not in self.switches or not self.fabric.graph.has_edge(a, b) \
                    or frozenset((a, b)) in self.down:
                raise PolicyError(f"{name}: flow {p.key}: path {list(path)}: no live link {a}-{b}")
        if len(set(path)) != len(path):
            raise PolicyError(f"{name}: flow {p.key}: path {list(path)} visits a switch twice")
        if p.queue is not None and not (isinstance(p.queue, int) and p.queue >= 0):
            raise PolicyError(f"{name}: flow {p.key}: queue {p.queue!r}: expected an integer >= 0")

    def _checked(self, moves) -> list[Placement]:
        moves = list(moves or ())
        for p in moves:
            f = self.sched.flows.get(p.key)
            if f is None:
                raise PolicyError(f"{self.routing}: a move of {p.key}, which is not a watched flow")
            self._check(p, f.src, f.dst)
        return moves

    def port_stats(self, dpid: int, stats, now: float) -> None:
        """stats: (port, tx_bytes, rx_bytes) of one switch."""
        st = self.by_dpid.get(dpid)
        self.last_stats_s = max(self.last_stats_s, now)
        if st is not None:
            for port, tx, rx in stats:
                self.load.observe(st.name, port, tx, rx, now)

    def flow_stats(self, dpid: int, stats, now: float) -> None:
        """stats: (cookie, byte_count) of one switch's per-flow entries."""
        st = self.by_dpid.get(dpid)
        if st is not None and self.sched is not None:
            self.sched.flow_stats(st.name, stats, now)

    def flow_removed(self, dpid: int, cookie: int, now: float, match: dict | None = None) -> Plan:
        if self.sched is None:
            return []
        gone, plan = self.sched.flow_removed(cookie, now, match)
        if gone is not None:
            self.policy.flow_ended(now, gone, self.observation(now))
        return plan

    def poll_done(self, now: float) -> Plan:
        """A round of statistics is in: the policy moves what it moves."""
        if self.sched is None:
            if self.policy.poll(now, self.observation(now)):
                raise PolicyError(f"{self.routing}: poll moved flows, but the policy does not watch any "
                                  "(sees_flows is False)")
            return []
        moves = self._checked(self.policy.poll(now, self.observation(now)))
        return [st for st in self.sched.move(moves, now) if st]

    def reroute_record(self, plan: Plan, now: float) -> dict:
        """A rebalance about to be installed: when its evidence arrived and when it was decided."""
        rec = {"observed_s": self.last_stats_s or None, "decided_s": now, "installed_s": None,
               "operations": sum(len(st) for st in plan)}
        self.reroutes.append(rec)
        return rec

    def reroute_installed(self, rec: dict, now: float) -> None:
        """Every stage of the rebalance is confirmed by the switches' barrier replies."""
        rec["installed_s"] = now

    def announce(self, body, now: float) -> tuple[int, dict]:
        """(HTTP status, answer). Policies without co-scheduling answer 'go now'."""
        try:
            ann = parse_announcement(body, self.fabric)
        except AnnounceError as e:
            return 400, {"error": str(e)}
        if not self.policy.coschedules:
            return 200, Answer(ann.job).to_dict()
        answer = self.policy.announce(now, ann, self.observation(now))
        if self.sched is not None and answer.placements:
            try:
                moves = self._open_flow_moves(answer)
            except PolicyError as e:  # a path that cannot be installed: the answer still stands
                self.policy_failed(now, "announce", e)
                moves = []
            self.announce_plan += [st for st in self.sched.move(moves, now) if st]
        return 200, answer.to_dict()

    def _open_flow_moves(self, answer: Answer) -> list[Placement]:
        """The answer's paths for the job's flows already open: agents and programs keep
        their connections across iterations, so a placement that applied only to new
        flows would leave the job wherever its connections were placed before it announced."""
        want = {(p.src, p.dst): p.path for p in answer.placements}
        mine = [e for e in sorted(self.sched.flows.values(), key=lambda e: e.flow_id)
                if e.path is not None and (e.src, e.dst) in want]
        for e in mine:
            if e.path == want[e.src, e.dst]:  # already there: the job's all the same (controller-state.json)
                e.job = answer.job
        return self._checked([Placement(e.key, want[e.src, e.dst], job=answer.job,
                                        reason=f"announced placement of job {answer.job}")
                              for e in mine if e.path != want[e.src, e.dst]])

    def take_announce_plan(self) -> Plan:
        """The rule operations announcements asked for since the last call (the engine installs them)."""
        plan, self.announce_plan = self.announce_plan, []
        return plan

    # -- inspection ---------------------------------------------------------
    def state(self, now: float) -> dict:
        try:
            extra = dict(self.policy.state(now, self.observation(now)) or {})
        except Exception as e:  # the policy's report failed: report the rest
            self.policy_failed(now, "state", e)
            extra = {}
        return {
            "time_s": now,
            "routing": self.routing,
            "policy": self.policy.describe() | {"policy": self.routing},
            "links_down": sorted(sorted(l) for l in self.down),
            "link_loads": self.load.snapshot(min_gbps=1e-9),
            "flows": self.sched.snapshot() if self.sched else [],
            "decisions": list(self.sched.decisions) if self.sched else [],
            "jobs": extra.pop("jobs", []),
            "policy_state": extra,
            "policy_failures": list(self.failures),
            "resyncs": list(self.resyncs),
            "counters": {**self.counters, **(self.sched.counters if self.sched else {}), **self.policy.counters},
            "reroutes": list(self.reroutes),
        }

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
