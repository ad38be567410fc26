"""The controller's own policy objects in the packet engine's loop.

flowsim.control.ControllerRouter holds the policy (controller.core.FabricController with the
experiment's policy and params); it reads a simulation's clock, five-tuples and counters. Here
those come from the ns-3 driver: every poll period of simulated time, and at each fault and each
controller restart, the driver prints its port and per-connection byte counters and waits; the
router's moves go back as route commands (the switches' flow entries change at that instant),
and the simulation goes on. Every connection opens before the replay starts, so the controller
places each one at t=0, as its packet-in does in the emulator, where the agents connect to all
their peers first.

Co-scheduling's phase gates are the flow engine's own object (flowsim.cosched.PhaseGates), with
this loop as its ``sim``: each communication op of an announced iteration waits on a hold task
(scenario.hold); the driver reports it ready and waits, the gates announce or wait for the
answer, and the hold ends at the answer's start (a "release" command). A pace in an answer caps
every rank of the job at its share of the NIC rate inside the answer's window ("pace" commands:
the driver's per-host token bucket over all the host's connections), as the flow engine's set_pace.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from flowsim.cosched import PhaseGates
from flowsim.routing import Observation
from packetsim.scenario import cable_ids, connect_order, five_tuples, node_path


class ControllerLoop:
    """What ControllerRouter reads of a simulation (its ``sim``), backed by the driver's polls."""

    def __init__(self, sc, net, router, faults=(), outages=()):
        """faults: the experiment's link and switch faults; outages: (from_s, until_s) of restarts."""
        self.sc, self.net, self.router = sc, net, router
        connect_order(sc)
        hs, hd, sport, dport, keys = five_tuples(sc, net)
        self.C_src, self.C_dst, self.C_sport = hs.tolist(), hd.tolist(), sport.tolist()
        self.C_key, self._dport = keys, dport.tolist()
        self.C_path: list = list(sc.paths) or [None] * len(sc.conns)
        self.now = 0.0
        self._t, self._lb, self._cb = 0.0, np.zeros(len(net.link_src)), np.zeros(len(sc.conns))
        self.port_of_link = None  # the driver's port of each directed link (scenario.write)
        self.reroutes = 0
        self.faults = sorted(faults, key=lambda f: f.at_ms)
        self.fault_log = [{"fault": f, "at_s": at, "ids": ids, "up": up, "moved": 0, "applied": False,
                           "links": [f"{net.names[int(net.link_src[i])]}-{net.names[int(net.link_dst[i])]}"
                                     for i in ids]}
                          for f, (at, ids, up) in zip(self.faults, cable_ids(net, self.faults))]
        sc.linkstates = [(r["at_s"], r["ids"], r["up"]) for r in self.fault_log]
        self.restart_at = sorted(b for _, b in outages)
        sc.wakes = sorted({r["at_s"] for r in self.fault_log} | set(self.restart_at))
        self._wakes = list(sc.wakes)
        sc.poll_s = float(router.poll_s)
        self.units = None  # experiment.model.Scale, with packet.units emulated: the driver runs in emulated units, the router in real
        router.attach(self)
        self.gates = None
        self.gate_events: list[dict] = []  # announce and offset events, for events.jsonl
        self.paces = 0  # pace answers applied (a "pace" command per host of the job)
        self._parked: dict[tuple[int, int], list[int]] = {}  # (job, iteration) -> hold tasks waiting
        self._out: list[str] = []

    def coschedule(self, jobs, announced: dict) -> None:
        """Phase gates for the scenario's hold tasks (jobs: the plan's jobs, announced: experiment.plan's
        announcements)."""
        self.jobs = [SimpleNamespace(name=jp.name) for jp in jobs]
        self.job_host = [np.array([self.net.host_index(h) for h in jp.hosts], np.int64) for jp in jobs]
        self.gates = PhaseGates(announced, self.router, on_event=self.gate_events.append)

    # -- what the phase gates call -----------------------------------------------------------
    def release(self, j: int, it: int, start_s: float) -> None:
        for h in self._parked.pop((j, it), []):
            self._release(h, start_s)

    def set_pace(self, j: int, share, from_s: float = 0.0, until_s: float = 0.0) -> None:
        """From from_s until until_s every host of job j sends at most share x its NIC rate (payload
        bytes, over all its connections); share None lifts the last pace now (flowsim's set_pace)."""
        paced = share is not None and until_s > from_s
        self.paces += paced
        d = self._dilation()
        link = self.units.link if self.units is not None else 1.0  # driver B/s per real B/s: bytes / dilation
        for h in self.job_host[j].tolist():
            Bps = float(share) * self.net.host_nic_Bps(h) * link if paced else 0.0
            self._out.append(f"pace {int(self.net.hosts[h])} {Bps!r} {from_s * d!r} {until_s * d!r}")

    def _release(self, h: int, start_s: float) -> None:
        j, r, it = self.sc.holds[h]
        now = self.now
        self.now = max(now, start_s)  # the rank's phase begins when the hold ends
        self.gates.begun(self, j, r, it)
        self.now = now
        self._out.append(f"release {h} {start_s * self._dilation()!r}")  # the driver's clock

    def on_gate(self, rec: dict) -> list[str]:
        """A hold task is ready (a gate line): announce, or release it at the answer's start, or park it."""
        self.now = float(rec["t"]) / self._dilation()
        h = int(rec["task"])
        j, r, it = self.sc.holds[h]
        opens = self.gates.ready(self, j, r, it)
        if opens == float("inf"):
            self._parked.setdefault((j, it), []).append(h)
        else:
            self._release(h, opens)
        out, self._out = self._out, []
        return out

    def _dilation(self) -> float:
        """Driver seconds per real second: the dilation with packet.units emulated, else 1."""
        return self.units.dilation if self.units is not None else 1.0

    # -- what the router reads ------------------------------------------------------------
    def five_tuple(self, c: int) -> tuple[int, int, int, int]:
        return (int(self.net.host_ip[self.C_src[c]]), int(self.net.host_ip[self.C_dst[c]]), self.C_sport[c],
                self._dport[c])

    def conn_bytes(self) -> np.ndarray:
        return self._cb.copy()

    # -- the run ---------------------------------------------------------------------------
    def place(self) -> None:
        """t=0: the base paths, then the controller places every connection, in connect order."""
        n = len(self.sc.conns)
        if not n:
            return
        order = np.array(sorted(range(n), key=lambda c: self.sc.conns[c][:3]), np.int64)
        hs, hd = np.asarray(self.C_src)[order], np.asarray(self.C_dst)[order]
        indptr, links = self.router.route(self.net, hs, hd, self.C_key[order], conns=order)
        paths = [None] * n
        for k, c in enumerate(order.tolist()):
            paths[c] = links[indptr[k]:indptr[k + 1]]
        bad = [c for c, p in enumerate(paths) if len(p) == 0]
        if bad:
            raise ValueError(f"no path from {self.sc.conns[bad[0]][3]} to {self.sc.conns[bad[0]][4]}")
        self.sc.paths = paths
        self.C_path = list(paths)

    def on_poll(self, rec: dict) -> list[str]:
        """A poll line from the driver: the router's answer as route commands."""
        if "task" in rec:
            return self.on_gate(rec)
        now = float(rec["t"])
        lb = np.asarray(rec["ports"], np.float64)[self.port_of_link]
        cb = np.asarray(rec["conns"], np.float64)
        if self.units is not None:
            now, lb, cb = now / self.units.dilation, lb / self.units.bytes, cb / self.units.bytes
        self.now = now
        net = self.net
        dt = now - self._t
        ids = np.arange(len(cb), dtype=np.int64)
        obs = Observation(now, net, lb, (lb - self._lb) / dt if dt > 0 else np.zeros_like(lb), ids,
                          np.asarray(self.C_src, np.int64), np.asarray(self.C_dst, np.int64), self.C_key, cb,
                          (cb - self._cb) / dt if dt > 0 else np.zeros_like(cb), self.C_path)
        self._t, self._lb, self._cb = now, lb, cb
        moved: dict = {}
        if rec.get("periodic"):
            moved.update(self.router.poll(now, obs))
        else:
            at = self._wakes.pop(0) if self._wakes else now  # the driver wakes in this order
            for r in self.fault_log:
                if r["at_s"] == at and not r["applied"]:
                    r["applied"] = True
                    net.link_up[r["ids"]] = r["up"]
                    net.version += 1
                    got = self.router.links_changed(now, obs)
                    r["moved"] = sum(1 for c, p in got.items() if len(p) and not np.array_equal(p, self.C_path[c]))
                    moved.update(got)
            if at in self.restart_at:
                moved.update(self.router.wake(now, obs))
        cmds = []
        for c, p in sorted(moved.items()):
            if len(p) and not np.array_equal(p, self.C_path[c]):
                nodes = node_path(net, p)
                cmds.append(f"route {c} {len(nodes)} {' '.join(map(str, nodes))}")
                self.C_path[c] = p
                self.reroutes += 1
        return cmds
