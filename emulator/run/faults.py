"""Faults applied during a replay, at emulated times.

- link down/up: the link's switch-side interface (root namespace) goes down;
  the veth peer loses its carrier too, OVS reports the port down, and the
  controller reroutes.
- switch down/up: what a crashed switch looks like to the rest of the
  fabric. Its OpenFlow session ends, every one of its links goes dark (its
  ports and its neighbours' ports toward it go down) and its tables are
  lost. When it comes back it reconnects empty, the controller installs it
  from scratch, and only then do its links come up (it boots before it
  forwards), so no neighbour hashes traffic into empty tables.
- straggler: nothing to do here; the rank's plan carries the factor and the
  agent stretches every compute op that starts after the fault's time.
- controller restart: the controller process stops, stays away down_ms, and
  starts again; the switches (fail-secure) keep forwarding on the flows they
  hold, and the new controller resynchronizes them when they reconnect.

Each applied fault is an event in events.jsonl and a row of summary "faults".
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time

from badinput import InputError
from badinput.paths import open_out
from emulator.testbed.process import TestbedError, wait_for

WAIT_CHUNK_S = 3600.0  # the timer waits in pieces: no wait ever exceeds threading.TIMEOUT_MAX


def check(exp) -> None:
    """Every fault (and a controller restart's outage) falls within the run's wall-clock limit
    (testbed.timeout_s, at this dilation): a later one could never be applied."""
    limit_s = min(exp.testbed.timeout_s, threading.TIMEOUT_MAX)
    raw = exp.raw.get("faults") if isinstance(exp.raw.get("faults"), list) else []
    for f in exp.faults:
        end_ms = f.at_ms + (f.down_ms or 0.0)
        if end_ms / 1000.0 * exp.scale.dilation <= limit_s:
            continue
        # The model sorts faults by time: name the file's own index.
        i = next((j for j, r in enumerate(raw) if isinstance(r, dict) and r.get("at_ms") == f.at_ms), None)
        key = f"faults[{i}].at_ms" if i is not None else "faults"
        max_ms = limit_s / exp.scale.dilation * 1000.0
        raise InputError(key, f"a time the run reaches: at_ms{' + down_ms' if f.down_ms else ''} <= {max_ms:.6g} "
                              f"ms (testbed.timeout_s {exp.testbed.timeout_s:g} s of wall clock at dilation "
                              f"{exp.scale.dilation:g}x)", f"{end_ms:g} ms", exp.source)


def root_side(fabric, link: tuple) -> tuple[str, str]:
    """(node, peer) with node in the root namespace: a switch end of the link."""
    a, b = link
    return (a, b) if fabric.node(a)["role"] == "switch" else (b, a)


class FaultInjector:
    def __init__(self, tb, faults, t0: float, dilation: float, events_path: str, log=print,
                 run=subprocess.run):
        self.tb, self.faults, self.t0, self.dilation = tb, list(faults), t0, dilation
        self.events_path, self.log, self.run = events_path, log, run
        self.applied: list[dict] = []
        self._controller_targets: dict[str, str] = {}  # failed switch -> its controller target
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="faults", daemon=True)

    def start(self):
        if self.faults:
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def due_s(self, fault) -> float:
        """Wall-clock time of a fault: at_ms is real-cluster time, stretched by the dilation."""
        return self.t0 + fault.at_ms / 1000.0 * self.dilation

    def _loop(self):
        i = 0  # faults handed to apply() so far
        try:
            for f in self.faults:
                while (left := self.due_s(f) - time.time()) > 0:
                    if self._stop.wait(min(left, WAIT_CHUNK_S)):
                        return
                self.apply(f)
                i += 1
        except Exception as e:  # noqa: BLE001: say so, and record every fault left unapplied
            why = f"the fault thread failed: {type(e).__name__}: {e}"[:300]
            self.log(f"[fault] {why}; {len(self.faults) - i} fault(s) not applied")
            for f in self.faults[i:]:
                now = time.time()
                self.applied.append({"kind": "fault", "job": None, "rank": None, "fault": _name(f),
                                     "at_ms": f.at_ms, "start": now, "end": now, "ok": False, "error": why})

    def apply(self, f) -> dict:
        t = time.time()
        ev = {"kind": "fault", "job": None, "rank": None, "fault": _name(f), "at_ms": f.at_ms, "start": t}
        try:
            ev.update(getattr(self, "_" + f.kind)(f))
            ev["ok"] = "error" not in ev
        except Exception as e:  # a fault that could not be applied is recorded, never fatal here
            ev.update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
        ev["end"] = time.time()
        self._record(ev)
        self.log(f"[fault] {f.describe()} at {f.at_ms:g} ms" + ("" if ev["ok"] else f" FAILED: {ev.get('error')}"))
        return ev

    def _record(self, ev: dict) -> None:
        # O_APPEND and one write per line: safe beside the runner's own appends.
        with open_out(os.path.dirname(self.events_path), os.path.basename(self.events_path), append=True) as fh:
            fh.write(json.dumps(ev) + "\n")
        self.applied.append(ev)  # after the write: a failed write leaves it to _loop's report

    # -- one method per kind: what it did, as event fields ---------------------
    def _link(self, f) -> dict:
        node, peer = root_side(self.tb.fabric, f.link)
        out = {"link": f"{f.link[0]}-{f.link[1]}"}
        err = self._cmd([*self.tb.ip_argv(node), "link", "set", "dev", self.tb.intf(node, peer), f.state])
        return {**out, "error": err} if err else out

    def _switch(self, f) -> dict:
        sw = f.switch
        br = self.tb.mn_name(sw)
        nbrs = sorted(self.tb.fabric.graph.neighbors(sw))
        ends = [(sw, nbr) for nbr in nbrs]
        # And the neighbours' own ends of switch-to-switch links: where a link
        # runs through a bridge (the AF_XDP link namespace) no carrier loss
        # reaches them, and a dead switch reports nothing itself.
        ends += [(nbr, sw) for nbr in nbrs if self.tb.fabric.node(nbr)["role"] == "switch"]
        # One `ip -batch` per namespace the ends live in (the run's own switch daemons have theirs).
        batches: dict[tuple, str] = {}
        for node, peer in ends:
            ip = tuple(self.tb.ip_argv(node))
            batches[ip] = batches.get(ip, "") + f"link set dev {self.tb.intf(node, peer)} {f.state}\n"
        errors = []
        if f.state == "down":
            vsctl, of = self.tb.vsctl(sw), self.tb.ofctl_target(sw)
            r = self.run([*vsctl, "get-controller", br], capture_output=True, text=True)
            self._controller_targets[sw] = (r.stdout or "").strip()
            errors.append(self._cmd([*vsctl, "del-controller", br]))
            errors += [self._cmd([*ip, "-batch", "-"], input=lines) for ip, lines in batches.items()]
            errors.append(self._cmd(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", of]))
            errors.append(self._cmd(["ovs-ofctl", "-O", "OpenFlow13", "del-groups", of]))
        else:
            # It boots before it forwards: its session first, and only once the
            # controller has installed it do its links come up, so no neighbour
            # sends into an empty table.
            target = self._controller_targets.pop(sw, None)
            if target:
                errors.append(self._cmd([*self.tb.vsctl(sw), "set-controller", br, *target.split()]))
                errors.append(self._wait_ready(sw))
            errors += [self._cmd([*ip, "-batch", "-"], input=lines) for ip, lines in batches.items()]
        out = {"switch": sw, "links": len(nbrs), "peers_down": self._peers_down(sw)}
        errors = [e for e in errors if e]
        return {**out, "error": "; ".join(errors)} if errors else out

    def _wait_ready(self, sw: str) -> str | None:
        try:
            wait_for(lambda: sw in ((self.tb.controller_status() or {}).get("switches_ready") or ()),
                     self.tb.ready_timeout_s, f"the controller to install {sw} again")
        except TestbedError as e:
            return str(e)
        return None

    def _peers_down(self, sw: str) -> list[str]:
        """The neighbouring switches whose port toward sw is down now (no carrier, or down itself)."""
        out = []
        for nbr in sorted(self.tb.fabric.graph.neighbors(sw)):
            if self.tb.fabric.node(nbr)["role"] != "switch":
                continue
            r = self.run(self.tb.in_netns_argv(nbr, ["cat", f"/sys/class/net/{self.tb.intf(nbr, sw)}/carrier"]),
                         capture_output=True, text=True)
            if (r.stdout or "").strip() != "1":
                out.append(nbr)
        return out

    def _straggler(self, f) -> dict:
        # Applied by the agent (its plan has the factor); recorded when it takes effect.
        return {"host": f.straggler, "factor": f.factor}

    def _controller(self, f) -> dict:
        times = self.tb.restart_controller(down_s=f.down_ms / 1000.0 * self.dilation, interrupted=self._stop)
        if times is None:
            return {"error": "the run ended during the restart"}
        return {"down_ms": f.down_ms, "outage_s_wall": times["ready_at"] - times["stopped_at"], **times}

    def _cmd(self, cmd: list[str], input: str | None = None) -> str | None:
        """Run one command; its error text, or None when it worked."""
        r = self.run(cmd, capture_output=True, text=True, input=input)
        return None if r.returncode == 0 else f"{' '.join(cmd[:3])}: {(r.stderr or '').strip()[:200]}"


def _name(f) -> str:
    return f"{f.kind} {f.state}" if f.state else "controller restart" if f.kind == "controller" else f.kind
