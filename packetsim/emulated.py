"""`packet: {units: emulated}`: the packet engine in the emulator's own units.

This is how the packet engine is checked against the emulator, ns-3's TCP against Linux TCP
through OVS (docs/packet-engine.md, "Against the emulator"). The scenario is planned in real
units as always, then scaled as the emulator scales it: link rates x scale.link, bytes x
scale.bytes, times x the dilation (compute, job starts, faults, the controller's polls). The
transport is the emulator's: its MTU, its queues in bytes, and the delay its OVS switches add at
each hop (measured: bench/bench_hop_latency.py). ns-3 then runs in emulated seconds, and every
result is divided back (to_real), so summary.json is in real units, as the emulator's is.
"""
from __future__ import annotations

import copy

from badinput import InputError
from experiment.model import Scale
from experiment.transport import HTB_BURST_S, QUEUE_PACKET_BYTES, emulator_mtu, emulator_queue_bytes
from packetsim.scenario import TRANSFER
from packetsim.transport import Transport, loss_settings

# One-way delay a link to or from an OVS userspace switch adds, emulated microseconds: ping RTT
# through 1, 3 and 5 switches grows 203 us a link (docs/packet-engine.md, "Against the emulator").
HOP_LATENCY_US = 100.0


def units(exp) -> Scale | None:
    """The emulator's factors (emulated = real x factor) when packet.units is emulated, else None."""
    return exp.scale if exp.packet.units == "emulated" else None


def check(exp) -> None:
    """What units: emulated needs (InputError): the file's scale, and a congestion control named
    for both engines (without one the emulator's hosts take the kernel's default, which ns-3
    cannot know); ECN and spraying have no emulator counterpart to compare with."""
    if not exp.scale_given:
        raise InputError("scale", "a scale: section with packet.units emulated (its factors are the units)",
                         "no scale", exp.source)
    if exp.transport.tcp.cc is None:
        raise InputError("transport.tcp.cc", "a congestion control with packet.units emulated (the emulator's "
                         "hosts otherwise take the kernel's default)", "none", exp.source)
    if exp.transport.ecn is not None:
        raise InputError("transport.ecn", "no ECN with packet.units emulated (the emulator has none)", "ecn",
                         exp.source)


def transport(exp) -> Transport:
    """The transport the emulator runs, in emulated units (emulator.testbed.transport's rules)."""
    t = exp.transport
    mtu, buf = emulator_mtu(exp), emulator_queue_bytes(exp)
    if buf is None:
        buf = max(exp.testbed.queue_packets * QUEUE_PACKET_BYTES, 2 * mtu)
    hop = HOP_LATENCY_US if exp.packet.hop_latency_us is None else float(exp.packet.hop_latency_us)
    d = exp.scale.dilation
    base = ({k: t.latency_us.of(k) for k in ("host", "fabric", "nvlink")} if t.latency_us is not None
            else {"host": exp.latency_us, "fabric": exp.latency_us, "nvlink": 0.0})
    # Real latency is stretched as the emulator's netem stretches it; NVLink domains are kernel
    # bridges, not OVS, so only host and fabric links cross an OpenFlow switch.
    lat = {k: v * d + (hop if k != "nvlink" else 0.0) for k, v in base.items()}
    return Transport(cc=t.tcp.cc, mtu_bytes=mtu, switch_buffer_bytes=buf, ecn=None, latency_us=lat, spray=False,
                     ack_priority=True, htb_burst_s=HTB_BURST_S, **loss_settings(t))


def to_emulated(sc, net, u: Scale) -> None:
    """Scale a real-unit scenario and its net to emulated units, in place."""
    b, d = u.bytes, u.dilation
    sc.sizes = [max(1, round(s * b)) if k == TRANSFER else s for k, s in zip(sc.kinds, sc.sizes)]
    sc.durations = [x * d for x in sc.durations]
    sc.slice_bytes = max(1, round(sc.slice_bytes * b))
    sc.reroutes = [(at * d, c, p) for at, c, p in sc.reroutes]
    sc.linkstates = [(at * d, ids, up) for at, ids, up in sc.linkstates]
    sc.straggles = [(t, at * d, f) for t, at, f in sc.straggles]
    sc.wakes = [at * d for at in sc.wakes]
    sc.paces = [(n, Bps * u.link, a * d, z * d) for n, Bps, a, z in sc.paces]  # B/s x bytes / dilation
    sc.poll_s *= d
    if sc.bin_s is not None:
        sc.bin_s *= d


def scaled_net(net, u: Scale):
    """A copy of the net at emulated link rates, for the driver; the controller keeps the real one
    (its observations come back in real units, ControllerLoop.units)."""
    out = copy.copy(net)
    out.link_gbps = net.link_gbps * u.link
    out.host_nic = net.host_nic * u.link
    return out


def to_real(res: dict, built: dict, u: Scale) -> None:
    """The driver's results and links back in real units, in place: times / dilation, bytes /
    scale.bytes (so rates / scale.link)."""
    b, d = u.bytes, u.dilation
    meta = res["meta"]
    for k in ("t0", "sim_end", "bin_s"):
        if meta.get(k) is not None and meta[k] >= 0:
            meta[k] /= d
    for t in res["tasks"]:
        for k in ("ready", "start", "end"):
            if t[k] >= 0:  # -1: never happened
                t[k] /= d
    for c in res["conns"]:
        c["bytes"] /= b
        c["retx_bytes"] /= b
    for q in res["queues"]:
        for k in ("mean", "p99", "max"):
            q[k] /= b
        q["bins"] = [x / b for x in q["bins"]]
        q["qbins"] = [x / b for x in q["qbins"]]
    built["links"] = [(a, c, kind, gbps / u.link) for a, c, kind, gbps in built["links"]]
