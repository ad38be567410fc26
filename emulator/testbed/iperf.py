"""iperf3 between testbed hosts: the reference traffic for benches and shaping tests."""
from __future__ import annotations

import re
import time

from emulator.testbed.process import TestbedError, wait_for

BASE_PORT = 5201
# Clients run this much longer than the window, so that every stream is still sending at its end.
MARGIN_S = 15.0

_PORT = re.compile(r":(\d+)\s")
_RECEIVED = re.compile(r"bytes_received:(\d+)")


def received_bytes(ss_out: str) -> dict[int, int]:
    """Bytes received per local port, summed over the established connections in `ss -tinH` output
    (an iperf3 server's control and data connections share its port)."""
    out: dict[int, int] = {}
    port = None
    for line in ss_out.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # a connection line: state? recv-q send-q local peer
            m = _PORT.search(line + " ")
            port = int(m.group(1)) if m else None
            continue
        m = _RECEIVED.search(line)
        if port is not None and m:
            out[port] = out.get(port, 0) + int(m.group(1))
    return out


def iperf3_flows(tb, flows: list[tuple[str, str]], duration_s: float = 4.0, via: str = "ip") -> list[float]:
    """Run one TCP stream per (src, dst) host pair at once; the Mb/s each received in one common
    window of `duration_s`, which opens once every stream has delivered data.

    iperf3's own averages each cover their client's lifetime, and the clients start a few hundred
    ms apart, so their sum overstates a link the streams share by the skew (0.25 s in 4 s: 1.06x).
    Here the receivers' TCP byte counters (`ss`, after any ingress shaping) are read at both ends of
    the window, on each host with its own timestamps. Each stream gets its own server port, so
    several may share a destination. via: the destination's address to use, its network "ip" or,
    between GPUs of one server, its "nvlink_ip" (the NVLink bridge)."""
    procs = []
    ports = {dst: [] for _, dst in flows}
    for i, (_, dst) in enumerate(flows):
        ports[dst].append(BASE_PORT + i)

    def sample() -> dict[int, tuple[int, float]]:
        got = {}
        for dst, ps in ports.items():
            flt = " or ".join(f"sport = :{p}" for p in ps)
            t0 = time.monotonic()
            out = tb.host(dst).cmd(f"ss -tinH state established '( {flt} )'")
            t = (t0 + time.monotonic()) / 2
            by_port = received_bytes(out)
            for p in ps:
                got[p] = (by_port.get(p, 0), t)
        return got

    try:
        for i, (_, dst) in enumerate(flows):
            # -1: serve one test and exit, so nothing outlives the measurement.
            procs.append(tb.host(dst).popen(["iperf3", "-s", "-1", "-p", str(BASE_PORT + i)]))
        for i, (_, dst) in enumerate(flows):
            wait_for(lambda: f":{BASE_PORT + i} " in tb.host(dst).cmd("ss -ltnH"), 10, f"iperf3 server on {dst}")
        clients = [tb.host(src).popen(["iperf3", "-c", tb.fabric.node(dst)[via], "-p", str(BASE_PORT + i),
                                       "-t", f"{duration_s + MARGIN_S:g}"]) for i, (src, dst) in enumerate(flows)]
        procs += clients
        def flowing():
            # The control connection alone carries a few hundred bytes; data flowing means far more.
            s = sample()
            return s if all(b > 65536 for b, _ in s.values()) else None
        first = wait_for(flowing, MARGIN_S / 2, "every iperf3 stream to deliver data")
        time.sleep(duration_s)  # the measurement window itself, not a wait for a condition
        last = sample()
        ended = [f"{src}->{dst}" for (src, dst), p in zip(flows, clients) if p.poll() is not None]
        if ended:
            raise TestbedError(f"iperf3 streams {', '.join(ended)} ended inside the measurement window")
        return [(last[p][0] - first[p][0]) * 8 / (last[p][1] - first[p][1]) / 1e6
                for p in (BASE_PORT + i for i in range(len(flows)))]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
