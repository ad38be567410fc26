"""The experiment file's `transport:` section: what the hosts' transport and the switches do.

Engine-neutral: TCP's congestion control, the MTU, each switch output port's buffer, RED/ECN
marking and the latency of each link kind (docs/transport.md). Every key is optional; a key
left out means "the engine's own default" (the emulator: the kernel's congestion control, 9000-
byte frames, testbed.queue_packets). Each engine models some keys, ignores others (and says so
in summary.json `model`) and refuses the rest: SUPPORT is the table, check_transport() the one
function every engine calls.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from badinput import InputError
from experiment.settings import setting

CCS = ("newreno", "cubic", "dctcp", "bbr")
# How a sender decides a segment is lost: "dupack", three SACKed segments or duplicate ACKs above it
# (RFC 6675's DupThresh: ns-3 3.37's only rule); "rack", by time (RFC 8985's RACK: Linux's default).
LOSS_DETECTIONS = ("dupack", "rack")
# 576: the smallest IPv4 datagram every host must take (RFC 791); 65535: IPv4's total length.
MIN_MTU_BYTES, MAX_MTU_BYTES = 576, 65535
MAX_BUFFER_BYTES = 1 << 34  # 16 GiB: far beyond any switch's whole memory
DEFAULT_SWITCH_BUFFER_BYTES = 4 << 20  # per output port when unset: a few MiB, as shallow-buffer datacenter switches
MAX_LATENCY_US = 1e6
LINK_KINDS = ("host", "fabric", "nvlink")
NUM = (int, float)
# The emulator's defaults, here so that the packet engine can mirror them (packet: {units: emulated}).
# Jumbo frames: AI fabrics run 4096 to 9000, and it cuts the switches' packet rate 6x.
EMULATOR_MTU_BYTES = 9000
# OVS's AF_XDP frames are 4 KiB; 3498 B is its MTU ceiling. Keep a margin.
AFXDP_MTU_BYTES = 3000
# Without mtu_bytes the emulator sizes its frames to its links: a frame takes no longer on the
# slowest link into or out of a switch than a 9000-byte one at 10 Mb/s (the default scale: 7.2 ms),
# from 9000 bytes up to EMULATOR_MAX_SIZED_MTU_BYTES. An emulated frame stands for megabytes of real
# traffic at any scale, and the switches pay per frame (docs/datapaths.md, "Frames sized to the links").
EMULATOR_FRAME_S = EMULATOR_MTU_BYTES * 8 / 10e6
# The largest frame measured to cross OVS's userspace switches is 65520 (bench/probe_mtu.py); a margin.
EMULATOR_MAX_SIZED_MTU_BYTES = 65000
# testbed.queue_packets counts packets of this size: a queue's bound is in bytes, so jumbo frames
# do not make it deeper in time.
QUEUE_PACKET_BYTES = 1500
# The emulator's HTB bursts at line rate up to two frames or this much of its rate's traffic, no more (a
# larger burst would let a message of the emulated size, often ~100 kB, pass unshaped).
HTB_BURST_S = 0.001


def emulator_mtu_bytes(mtu_bytes: int | None, switch_link_mbps: float, queue_bytes: int | None = None,
                       afxdp: bool = False) -> int:
    """The emulator's MTU: the file's mtu_bytes, else sized to the slowest link into or out of a switch
    (switch_link_mbps, emulated): what that link carries in EMULATOR_FRAME_S, within 9000 and
    EMULATOR_MAX_SIZED_MTU_BYTES, and no more than half a switch queue of queue_bytes (emulated) when
    the file sets one (a queue holds two frames). AF_XDP ports carry AFXDP_MTU_BYTES at most."""
    if mtu_bytes is None:
        mtu_bytes = int(switch_link_mbps * 1e6 / 8 * EMULATOR_FRAME_S)
        mtu_bytes = min(max(mtu_bytes, EMULATOR_MTU_BYTES), EMULATOR_MAX_SIZED_MTU_BYTES)
        if queue_bytes is not None:
            mtu_bytes = max(EMULATOR_MTU_BYTES, min(mtu_bytes, queue_bytes // 2))
    return min(mtu_bytes, AFXDP_MTU_BYTES) if afxdp else mtu_bytes


def emulator_queue_bytes(exp) -> int | None:
    """Each switch output port's queue limit in the emulator, emulated bytes: switch_buffer_bytes x
    scale.bytes (None: testbed.queue_packets of QUEUE_PACKET_BYTES)."""
    b = exp.transport.switch_buffer_bytes
    return None if b is None else int(b * exp.scale.bytes)


def emulator_mtu(exp) -> int:
    """The emulator's MTU for exp (emulator_mtu_bytes with the file's keys): what its testbed sets and
    the packet engine in emulated units mirrors."""
    return emulator_mtu_bytes(exp.transport.mtu_bytes, switch_link_mbps(exp), emulator_queue_bytes(exp),
                              exp.testbed.datapath == "afxdp")


def switch_link_mbps(exp) -> float:
    """The emulated rate of the slowest link into or out of a switch (NVLink bridges aside)."""
    links = [d for _, _, d in exp.fabric().links()]
    rates = [exp.emulated_mbps(d["link_gbps"]) for d in links if d.get("kind") != "nvlink"]
    return min(rates) if rates else exp.emulated_mbps(min(d["link_gbps"] for d in links))


MAX_ACK_EVERY_SEGMENTS = 64  # a 64 KiB GRO burst of 1 KiB segments; past it a window stalls on the timer


@dataclass(frozen=True)
class Tcp:
    cc: str | None = setting(None, str, lambda v: v in CCS, "one of " + ", ".join(CCS))
    # A receiver ACKs once per this many full segments (its delayed-ACK timer still flushes a
    # short tail). RFC 1122's is 2; Linux with GRO at 100 Gb/s and up ACKs once per coalesced
    # burst (64 KiB: 7 segments of 9000-byte frames). A modelling choice: it cuts the ACKs a run
    # simulates.
    ack_every_segments: int | None = setting(None, int, lambda v: 1 <= v <= MAX_ACK_EVERY_SEGMENTS,
                                             f"segments in 1..{MAX_ACK_EVERY_SEGMENTS}")
    # RFC 8985's tail-loss probe: a flight whose last segments are lost is probed after about two
    # round trips instead of waiting for the minimum RTO. Linux sends it by default; ns-3 3.37 has none.
    tail_loss_probe: bool | None = setting(None, bool, None, "true or false")
    # RFC 8985's RACK: a segment is lost once one sent more than a reordering window after it was
    # delivered, not on three SACKed segments above it, so reordering (spraying) is not taken for
    # loss. It comes with the probe (RACK-TLP): rack sets tail_loss_probe unless the file says false,
    # which is refused.
    loss_detection: str | None = setting(None, str, lambda v: v in LOSS_DETECTIONS, " or ".join(LOSS_DETECTIONS))


@dataclass(frozen=True)
class Ecn:
    """RED marking on every switch output port: no mark below min_bytes of queue, probability
    rising linearly to max_prob at max_bytes, every packet marked above (DCTCP's K is min_bytes
    with min_bytes == max_bytes and max_prob 1)."""
    min_bytes: int = setting(65536, int, lambda v: 1 <= v <= MAX_BUFFER_BYTES, f"bytes in 1..{MAX_BUFFER_BYTES}")
    max_bytes: int = setting(65536, int, lambda v: 1 <= v <= MAX_BUFFER_BYTES, f"bytes in 1..{MAX_BUFFER_BYTES}")
    max_prob: float = setting(1.0, NUM, lambda v: 0 < v <= 1, "a probability in (0, 1]")


@dataclass(frozen=True)
class LatencyUs:
    """One-way delay of each link of a kind, real-cluster microseconds: host (NIC to its
    switch), fabric (switch to switch) and nvlink (inside a server)."""
    host: float = setting(0.0, NUM, lambda v: 0 <= v <= MAX_LATENCY_US, f"microseconds in 0..{MAX_LATENCY_US:.0f}")
    fabric: float = setting(0.0, NUM, lambda v: 0 <= v <= MAX_LATENCY_US,
                             f"microseconds in 0..{MAX_LATENCY_US:.0f}")
    nvlink: float = setting(0.0, NUM, lambda v: 0 <= v <= MAX_LATENCY_US,
                             f"microseconds in 0..{MAX_LATENCY_US:.0f}")

    def of(self, kind: str) -> float:
        return getattr(self, kind)


@dataclass(frozen=True)
class Transport:
    tcp: Tcp = Tcp()
    mtu_bytes: int | None = setting(None, int, lambda v: MIN_MTU_BYTES <= v <= MAX_MTU_BYTES,
                                     f"bytes in {MIN_MTU_BYTES}..{MAX_MTU_BYTES}")
    # Per switch output port, real-cluster bytes.
    switch_buffer_bytes: int | None = setting(None, int, lambda v: 1 <= v <= MAX_BUFFER_BYTES,
                                               f"bytes in 1..{MAX_BUFFER_BYTES}")
    ecn: Ecn | None = None
    latency_us: LatencyUs | None = None

    def given(self) -> dict:
        """The keys the file set, by dotted name (tcp.cc, mtu_bytes, ...), with their values."""
        out = {}
        for k in ("cc", "ack_every_segments", "tail_loss_probe", "loss_detection"):
            if getattr(self.tcp, k) is not None:
                out["tcp." + k] = getattr(self.tcp, k)
        for k in ("mtu_bytes", "switch_buffer_bytes"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.ecn is not None:
            out["ecn"] = _plain(self.ecn)
        if self.latency_us is not None:
            out["latency_us"] = _plain(self.latency_us)
        return out

    def to_dict(self) -> dict:
        """The section as a file writes it (only what was set)."""
        out: dict = {}
        for key, value in self.given().items():
            if key.startswith("tcp."):
                out.setdefault("tcp", {})[key[4:]] = value
            else:
                out[key] = value
        return out


KEYS = ("tcp.cc", "tcp.ack_every_segments", "tcp.tail_loss_probe", "tcp.loss_detection", "mtu_bytes",
        "switch_buffer_bytes", "ecn", "latency_us")


def _plain(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def parse(data, file, section_cls, read_settings) -> Transport:
    """transport: {...} as a Transport. section_cls and read_settings are experiment.model's
    readers (unknown keys refused, each setting checked)."""
    sec = section_cls(data, "transport", file)
    tcp_sec = section_cls(sec.get("tcp", dict, {}), "transport.tcp", file)
    tcp = Tcp(**read_settings(Tcp, tcp_sec))
    tcp_sec.done()
    if tcp.loss_detection == "rack" and tcp.tail_loss_probe is False:
        raise InputError("transport.tcp.tail_loss_probe", "true or unset with tcp.loss_detection rack (RACK comes "
                         "with its tail-loss probe, RFC 8985's RACK-TLP)", False, file)
    ecn = latency = None
    if "ecn" in data:
        es = section_cls(sec.get("ecn", dict), "transport.ecn", file)
        ecn = Ecn(**read_settings(Ecn, es))
        es.done()
        if ecn.min_bytes > ecn.max_bytes:
            raise InputError("transport.ecn.max_bytes", f"bytes >= min_bytes ({ecn.min_bytes})", ecn.max_bytes, file)
    if "latency_us" in data:
        ls = section_cls(sec.get("latency_us", dict), "transport.latency_us", file)
        latency = LatencyUs(**read_settings(LatencyUs, ls))
        ls.done()
    sec.used.update(("ecn", "latency_us"))
    kw = read_settings(Transport, sec)
    sec.done()
    t = Transport(tcp=tcp, ecn=ecn, latency_us=latency, **kw)
    if t.tcp.cc == "dctcp" and t.ecn is None:
        raise InputError("transport.ecn", "ECN marking (min_bytes, max_bytes, max_prob) with tcp.cc dctcp: "
                         "DCTCP reacts only to marks", None, file)
    if t.ecn is not None and t.switch_buffer_bytes is not None and t.ecn.max_bytes > t.switch_buffer_bytes:
        raise InputError("transport.ecn.max_bytes", f"bytes <= switch_buffer_bytes ({t.switch_buffer_bytes}): "
                         "a queue never grows past its buffer", t.ecn.max_bytes, file)
    return t


# What each engine does with each key: it models it, ignores it (summary.json `model` says so),
# or refuses it (exit 2). A new engine is one line.
MODELS, IGNORES, REFUSES = "models", "ignores", "refuses"
SUPPORT = {
    # The machine may refuse more (a congestion control its kernel lacks, no netem): the
    # emulator passes its own `machine` check.
    # The emulator's hosts run Linux, which always probes and detects losses with RACK: it takes
    # tail_loss_probe true and loss_detection rack, and refuses false and dupack (emulator.testbed.transport).
    "emulate": {"tcp.cc": MODELS, "tcp.ack_every_segments": REFUSES, "tcp.tail_loss_probe": MODELS,
                "tcp.loss_detection": MODELS,
                "mtu_bytes": MODELS, "switch_buffer_bytes": MODELS, "ecn": REFUSES, "latency_us": MODELS},
    "flow": {"tcp.cc": IGNORES, "tcp.ack_every_segments": IGNORES, "tcp.tail_loss_probe": IGNORES,
             "tcp.loss_detection": IGNORES,
             "mtu_bytes": IGNORES, "switch_buffer_bytes": IGNORES, "ecn": IGNORES, "latency_us": MODELS},
    "packet": dict.fromkeys(KEYS, MODELS),
}

WHY_REFUSED = {
    ("emulate", "tcp.ack_every_segments"): "nothing with engine: emulate (the hosts' kernel ACKs as it does, "
                                           "delayed ACKs and GRO; use engine: packet)",
    ("emulate", "ecn"): "no ECN marking with engine: emulate (the emulator's queues are HTB with bfifo leaves, "
                        "which never mark; use engine: packet)",
}


def check_transport(exp, engine: str, machine: Callable[[str, object], str | None] | None = None) -> list[str]:
    """Refuse (InputError naming transport.<key>) what `engine` cannot model of exp.transport;
    return the keys it ignores, for summary.json `model`. machine(key, value) -> why this machine
    cannot, or None: the engine's own detection (a missing qdisc or congestion control)."""
    table = SUPPORT.get(engine)
    given = exp.transport.given()
    if table is None:
        if given:
            raise InputError("transport", f"no transport: section with engine: {engine} (it has no entry in "
                             "experiment.transport.SUPPORT)", sorted(given), exp.source)
        return []
    ignored = []
    for key, value in given.items():
        what = table.get(key, REFUSES)
        if what == REFUSES:
            raise InputError(f"transport.{key}", WHY_REFUSED.get((engine, key), f"nothing (engine {engine} "
                             f"cannot model it)"), value, exp.source)
        if what == IGNORES:
            ignored.append(key)
            continue
        why = machine(key, value) if machine is not None else None
        if why:
            raise InputError(f"transport.{key}", why, value, exp.source)
    return ignored


def ignored_note(exp, engine: str) -> dict:
    """{key: value} of what `engine` ignores of every transport key, set or not (the flow engine
    models none of TCP, MTU, buffers or ECN: a run's answer does not depend on them)."""
    given = exp.transport.given()
    return {k: given.get(k) for k, what in SUPPORT[engine].items() if what == IGNORES}
