"""Faults applied during a replay, at emulated times: links going down and up.

A link is cut by setting its switch-side interface (root namespace) down:
the veth peer loses its carrier too, OVS reports the port down, and the
controller reroutes. Each applied fault is an event in events.jsonl.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time


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
        for f in self.faults:
            if self._stop.wait(max(0.0, self.due_s(f) - time.time())):
                return
            self.apply(f)

    def apply(self, f) -> dict:
        node, peer = root_side(self.tb.fabric, f.link)
        dev = self.tb.intf(node, peer)
        t = time.time()
        r = self.run(["ip", "link", "set", "dev", dev, f.state], capture_output=True, text=True)
        ev = {"kind": "fault", "job": None, "rank": None, "fault": f"link {f.state}",
              "link": f"{f.link[0]}-{f.link[1]}", "at_ms": f.at_ms, "start": t, "end": time.time(),
              "ok": r.returncode == 0}
        if r.returncode != 0:
            ev["error"] = (r.stderr or "").strip()[:200]
        self.applied.append(ev)
        # O_APPEND and one write per line: safe beside the runner's own appends.
        with open(self.events_path, "a") as fh:
            fh.write(json.dumps(ev) + "\n")
        self.log(f"[fault] link {f.link[0]}-{f.link[1]} {f.state} at {f.at_ms:g} ms"
                 + ("" if ev["ok"] else f" FAILED: {ev.get('error')}"))
        return ev
