"""Link shaping and NIC settings as planned command lists (pure; the testbed runs them).

HTB shapes each interface's egress; bounded bfifos below it set the queue
depth, so RTTs stay sane at low emulated rates, and small control packets
bypass the data queue.
"""
from __future__ import annotations


# IPv4 packets shorter than this count as control: a pure TCP ACK is at most
# 80 bytes (40 of options). Not 256: small *data* segments (a slice's tail)
# jumping their own flow's queue reorder it, and every reordering costs a
# spurious fast retransmit (measured: 223 retransmits, all DSACKed, at 256;
# none at 128).
CONTROL_MAX_BYTES = 128  # a power of two: the u32 filter matches it with a mask


def htb_cmds(dev: str, rate_mbps: float, queue_packets: int, mtu: int = 1500) -> list[str]:
    """tc -batch lines shaping one interface's egress to rate_mbps.

    Two leaves share the link rate: control packets (< 128 B: TCP ACKs) go
    first, data after. At emulated rates one jumbo frame takes milliseconds
    on the wire, so an ACK queued behind a window of data returns hundreds
    of ms late; the sender then stalls or retransmits for nothing, which a
    real fabric (where an ACK's queueing is negligible) would not do.

    Each queue is bounded in bytes (queue_packets of 1500 B), so jumbo
    frames do not make it deeper in time."""
    # burst: two frames or 1 ms of traffic. Larger bursts let a message of
    # the emulated size (often ~100 kB) pass at line rate, unshaped.
    burst_bytes = max(2 * mtu, int(rate_mbps * 1e6 / 8 * 0.001))
    shape = f"burst {burst_bytes} cburst {burst_bytes}"
    limit = max(queue_packets * 1500, 2 * mtu)
    ctl_mbps = rate_mbps * 0.05
    return [
        f"qdisc replace dev {dev} root handle 5: htb default 20",
        f"class replace dev {dev} parent 5: classid 5:1 htb rate {rate_mbps:.6f}mbit {shape}",
        f"class replace dev {dev} parent 5:1 classid 5:10 htb rate {ctl_mbps:.6f}mbit "
        f"ceil {rate_mbps:.6f}mbit prio 0 {shape}",
        f"class replace dev {dev} parent 5:1 classid 5:20 htb rate {rate_mbps - ctl_mbps:.6f}mbit "
        f"ceil {rate_mbps:.6f}mbit prio 1 {shape}",
        f"qdisc replace dev {dev} parent 5:10 handle 10: bfifo limit {limit}",
        f"qdisc replace dev {dev} parent 5:20 handle 20: bfifo limit {limit}",
        # IPv4 total length (bytes 2-3) below CONTROL_MAX_BYTES: its high bits are zero.
        f"filter replace dev {dev} parent 5: protocol ip prio 1 u32 match u16 0x0000 "
        f"{0xffff & ~(CONTROL_MAX_BYTES - 1):#06x} at 2 flowid 5:10",
    ]


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


def offload_cmd(devs: list[str]) -> str:
    """One shell line turning TX offloads off: TCP over the userspace datapath
    stalls with them on (checksums never filled in)."""
    return "; ".join(f"ethtool -K {d} tx off tso off gso off gro off >/dev/null 2>&1" for d in devs)

