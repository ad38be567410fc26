"""iperf3 between testbed hosts: the reference traffic for benches and shaping tests."""
from __future__ import annotations

import json

from emulator.testbed.process import wait_for


def iperf3_flows(tb, flows: list[tuple[str, str]], duration_s: float = 4.0) -> list[float]:
    """Run one TCP stream per (src, dst) host pair at once; received Mb/s of each.

    Each stream gets its own server port, so several may share a destination."""
    procs = []
    try:
        for i, (_, dst) in enumerate(flows):
            # -1: serve one test and exit, so nothing outlives the measurement.
            procs.append(tb.host(dst).popen(["iperf3", "-s", "-1", "-p", str(5201 + i)]))
        for i, (_, dst) in enumerate(flows):
            wait_for(lambda: f":{5201 + i} " in tb.host(dst).cmd("ss -ltnH"), 10, f"iperf3 server on {dst}")
        clients = [tb.host(src).popen(["iperf3", "-c", tb.fabric.node(dst)["ip"], "-p", str(5201 + i),
                                       "-t", f"{duration_s:g}", "-J"]) for i, (src, dst) in enumerate(flows)]
        procs += clients
        out = []
        for p in clients:
            doc = json.loads(p.communicate(timeout=duration_s + 30)[0])
            out.append(doc["end"]["sum_received"]["bits_per_second"] / 1e6)
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
