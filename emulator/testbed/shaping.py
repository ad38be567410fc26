"""Link shaping and NIC settings as planned command lists (pure; the testbed runs them).

HTB shapes each interface's egress; bounded bfifos below it set the queue
depth, so RTTs stay sane at low emulated rates, and pure TCP ACKs bypass
the data queue (nothing that carries data may: see TCP_DOFF_WORDS).
"""
from __future__ import annotations

import math

from experiment.transport import HTB_BURST_S, QUEUE_PACKET_BYTES


# Only pure TCP ACKs (no payload, no SYN/FIN/RST) may skip the data queue.
# Anything that carries sequence space must keep its place in its flow:
# real programs (gloo) send small control messages inside their data
# connections, and a "small packets first" class reordered them behind
# nothing, turning every reordering into a spurious retransmit (measured
# with a gloo all-reduce on the fat-tree: 1,000 to 1,400 DSACKed retransmits
# per run, 30% slower). u32 cannot subtract, so there is one filter per TCP
# header length: total length == 20 (IPv4, no options) + 4 x data offset.
TCP_DOFF_WORDS = range(5, 16)
ACK_FLAGS_MASK = 0x17  # ACK, RST, SYN, FIN
ACK_ONLY = 0x10


def pure_ack_matches(doff_words: int) -> str:
    """u32 clauses (offsets from the IPv4 header) matching a pure ACK whose TCP header is doff_words long."""
    return (f"match u8 0x45 0xff at 0 match u8 0x06 0xff at 9 "
            f"match u16 {20 + 4 * doff_words:#06x} 0xffff at 2 "
            f"match u8 {doff_words << 4:#04x} 0xf0 at 32 "
            f"match u8 {ACK_ONLY:#04x} {ACK_FLAGS_MASK:#04x} at 33")


def netem_limit_packets(rate_mbps: float, delay_us: float, queue_packets: int) -> int:
    """Packets netem may hold while they wait out their delay, before HTB sees
    them: what eight links at this rate deliver in the delay in 64-byte
    packets, above the queue's own bound. netem drops beyond it, where HTB's
    counters would not see the loss."""
    in_delay = math.ceil(8 * rate_mbps * 1e6 / 8 * delay_us * 1e-6 / 64)
    return queue_packets + max(1000, in_delay)


def htb_cmds(dev: str, rate_mbps: float, queue_packets: int, mtu: int = 1500,
             delay_us: float = 0.0, limit_bytes: int | None = None) -> list[str]:
    """tc -batch lines shaping one interface's egress to rate_mbps.

    Two leaves share the link rate: pure TCP ACKs go first, everything
    else (data of any size, SYN, FIN) after, in arrival order. At emulated
    rates one jumbo frame takes milliseconds on the wire, so an ACK queued behind a window of data returns hundreds
    of ms late; the sender then stalls or retransmits for nothing, which a
    real fabric (where an ACK's queueing is negligible) would not do.

    Each queue is bounded in bytes (queue_packets of 1500 B, or limit_bytes:
    a switch buffer from transport.switch_buffer_bytes), so jumbo frames do not
    make it deeper in time.

    delay_us > 0 (emulated microseconds; topology.latency_us times the time
    dilation) puts netem at the root with this HTB tree as its child: every
    packet waits delay_us, then queues for the link, as propagation ahead of
    the wire. (netem as HTB's leaf instead would overlap the delay with the
    queueing: a backlogged packet would not be delayed at all.)"""
    if delay_us < 0:
        raise ValueError(f"delay_us: expected >= 0, found {delay_us!r}")
    # burst: two frames or 1 ms of traffic. Larger bursts let a message of
    # the emulated size (often ~100 kB) pass at line rate, unshaped.
    burst_bytes = max(2 * mtu, int(rate_mbps * 1e6 / 8 * HTB_BURST_S))
    shape = f"burst {burst_bytes} cburst {burst_bytes}"
    if limit_bytes is not None and limit_bytes < 2 * mtu:
        raise ValueError(f"limit_bytes: expected >= two frames ({2 * mtu}), found {limit_bytes!r}")
    limit = max(queue_packets * QUEUE_PACKET_BYTES, 2 * mtu) if limit_bytes is None else limit_bytes
    ctl_mbps = rate_mbps * 0.05
    if delay_us > 0:
        held = queue_packets if limit_bytes is None else math.ceil(limit_bytes / 64)
        head = [f"qdisc replace dev {dev} root handle 4: netem delay {delay_us:.3f}us "
                f"limit {netem_limit_packets(rate_mbps, delay_us, held)}",
                f"qdisc replace dev {dev} parent 4:1 handle 5: htb default 20"]
    else:
        head = [f"qdisc replace dev {dev} root handle 5: htb default 20"]
    return head + [
        f"class replace dev {dev} parent 5: classid 5:1 htb rate {rate_mbps:.6f}mbit {shape}",
        f"class replace dev {dev} parent 5:1 classid 5:10 htb rate {ctl_mbps:.6f}mbit "
        f"ceil {rate_mbps:.6f}mbit prio 0 {shape}",
        f"class replace dev {dev} parent 5:1 classid 5:20 htb rate {rate_mbps - ctl_mbps:.6f}mbit "
        f"ceil {rate_mbps:.6f}mbit prio 1 {shape}",
        f"qdisc replace dev {dev} parent 5:10 handle 10: bfifo limit {limit}",
        f"qdisc replace dev {dev} parent 5:20 handle 20: bfifo limit {limit}",
    ] + [f"filter replace dev {dev} parent 5: protocol ip prio 1 handle 800::{d:x} u32 "
         f"{pure_ack_matches(d)} flowid 5:10" for d in TCP_DOFF_WORDS]


# One per host namespace, so the name need not be unique machine-wide.
IFB_NAME = "ifb0"


def ingress_redirect_cmds(dev: str, ifb: str) -> list[str]:
    """tc -batch lines sending everything dev receives through ifb's egress,
    where HTB can shape it. u32 match-all: this kernel has no matchall."""
    return [
        f"qdisc replace dev {dev} handle ffff: ingress",
        f"filter replace dev {dev} parent ffff: protocol all prio 1 u32 match u32 0 0 "
        f"action mirred egress redirect dev {ifb}",
    ]


# With userspace TSO a host's super-packet lasts at most this long on its link: a tenth of the
# fidelity monitor's 0.25 s link sample (emulator.run.fidelity.LINK_SAMPLE_S). Unbounded, a 64 KB
# packet outlasts a sample at low rates (0.4 s at 1.25 Mb/s), and one sample of a 64-GPU ring
# read 1.10 of the link's rate.
GSO_MAX_S = 0.025
GSO_MAX_BYTES = 65536  # the kernel's default gso_max_size


def gso_max_bytes(rate_mbps: float, mtu: int) -> int:
    """gso_max_size for a host NIC at rate_mbps: GSO_MAX_S of the link, at least one frame."""
    return int(min(GSO_MAX_BYTES, max(mtu, rate_mbps * 1e6 / 8 * GSO_MAX_S)))


def offload_cmd(devs: list[str], tso: bool = False) -> str:
    """One shell line turning TX offloads off: TCP over the userspace datapath
    stalls with them on (checksums never filled in). With OVS userspace TSO
    (tso) they stay on: the switch fills the checksums in, and carries one
    super-packet where it would carry up to 44 frames."""
    state = "on" if tso else "off"
    return "; ".join(f"ethtool -K {d} tx {state} tso {state} gso {state} gro {state} >/dev/null 2>&1" for d in devs)
