"""Link shaping and NIC settings as planned command lists (pure; the testbed runs them).

HTB shapes each interface's egress; a bounded pfifo below it sets the queue
depth, so RTTs stay sane at low emulated rates.
"""
from __future__ import annotations


def htb_cmds(dev: str, rate_mbps: float, queue_packets: int, mtu: int = 1500) -> list[str]:
    """tc -batch lines shaping one interface's egress to rate_mbps.

    The queue is bounded in bytes (queue_packets of 1500 B), so jumbo
    frames do not make it deeper in time."""
    # burst: two frames or 1 ms of traffic. Larger bursts let a message of
    # the emulated size (often ~100 kB) pass at line rate, unshaped.
    burst_bytes = max(2 * mtu, int(rate_mbps * 1e6 / 8 * 0.001))
    return [
        f"qdisc replace dev {dev} root handle 5: htb default 1",
        f"class replace dev {dev} parent 5: classid 5:1 htb rate {rate_mbps:.6f}mbit "
        f"burst {burst_bytes} cburst {burst_bytes}",
        f"qdisc replace dev {dev} parent 5:1 handle 10: bfifo limit {max(queue_packets * 1500, 2 * mtu)}",
    ]


def offload_cmd(devs: list[str]) -> str:
    """One shell line turning TX offloads off: TCP over the userspace datapath
    stalls with them on (checksums never filled in)."""
    return "; ".join(f"ethtool -K {d} tx off tso off gso off gro off >/dev/null 2>&1" for d in devs)


def parse_tc_class_stats(text: str) -> dict[str, dict]:
    """Parse `tc -s class show` output into {dev: {bytes, packets, overlimits}} for class 5:1."""
    out: dict[str, dict] = {}
    dev = None
    for line in text.splitlines():
        parts = line.split()
        if line.startswith("class htb 5:1") and " dev " in line:
            dev = parts[parts.index("dev") + 1] if "dev" in parts else None
        elif line.startswith("class htb 5:1"):
            dev = None
        elif dev and parts[:1] == ["Sent"]:
            # Sent 123 bytes 4 pkt (dropped 0, overlimits 5 requeues 0)
            stats = {"bytes": int(parts[1]), "packets": int(parts[3])}
            if "overlimits" in parts:
                stats["overlimits"] = int(parts[parts.index("overlimits") + 1])
            out[dev] = stats
            dev = None
    return out
