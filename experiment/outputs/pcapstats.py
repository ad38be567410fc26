"""`dtnet pcap-stats FILE`: the flows in a capture, by five-tuple, with scapy.

Per flow (protocol, source and destination address and port): packets,
bytes on the wire (the packet's full length, also when the capture kept
only its headers), TCP/UDP payload bytes (from the IP and transport
headers), the TCP payload bytes whose sequence range was already seen
(retransmissions), first and last time, and the rate between them. Times and rates
are those of the emulation (wall clock, emulated link rates), not
real-cluster figures. scapy is imported only here, when a file is read.
"""
from __future__ import annotations

import json

from badinput import InputError


def read_flows(path: str) -> dict:
    """{"file", "packets", "bytes", "first", "last", "flows": [...], "other": {...}} of a pcap or pcapng."""
    try:
        from scapy.config import conf
        from scapy.error import Scapy_Exception
        from scapy.layers.inet import IP, TCP, UDP
        from scapy.layers.inet6 import IPv6
        from scapy.layers.l2 import Ether
        from scapy.utils import PcapReader
    except ImportError:
        raise InputError("pcap-stats", "scapy installed (pip install scapy)", "no scapy", path) from None
    flows: dict[tuple, dict] = {}
    other = {"packets": 0, "bytes": 0}
    total = {"packets": 0, "bytes": 0, "first": None, "last": None}
    try:
        reader = PcapReader(path)
    except OSError as e:
        raise InputError("file", "a readable pcap file", e.strerror, path) from None
    except Scapy_Exception as e:
        raise InputError("file", "a pcap or pcapng file", str(e), path) from None
    conf.layers.filter([Ether, IP, IPv6, TCP, UDP])  # dissect only what a five-tuple needs
    try:
        with reader:
            for pkt in reader:
                t = float(pkt.time)
                size = getattr(pkt, "wirelen", None) or len(pkt)
                total["packets"] += 1
                total["bytes"] += size
                total["first"] = t if total["first"] is None else min(total["first"], t)
                total["last"] = t if total["last"] is None else max(total["last"], t)
                key, payload, seq = _five_tuple(pkt, IP, IPv6, TCP, UDP)
                if key is None:
                    other["packets"] += 1
                    other["bytes"] += size
                    continue
                f = flows.get(key)
                if f is None:
                    f = flows[key] = {"packets": 0, "bytes": 0, "payload_bytes": 0, "retrans_bytes": 0,
                                      "first": t, "last": t, "_seq": TcpSeq(seq) if seq is not None else None}
                f["packets"] += 1
                f["bytes"] += size
                f["payload_bytes"] += payload
                if f["_seq"] is not None and payload:
                    f["retrans_bytes"] += f["_seq"].seen_again(seq, payload)
                f["first"], f["last"] = min(f["first"], t), max(f["last"], t)
    except Scapy_Exception as e:
        raise InputError("file", "a whole pcap file", str(e), path) from None
    finally:
        conf.layers.unfilter()
    rows = []
    for (proto, src, sport, dst, dport), f in sorted(flows.items(), key=lambda kv: -kv[1]["bytes"]):
        del f["_seq"]
        span = f["last"] - f["first"]
        rows.append({"proto": proto, "src": src, "sport": sport, "dst": dst, "dport": dport, **f,
                     "rate_mbps": f["bytes"] * 8 / span / 1e6 if span > 0 else None})
    return {"file": path, **total, "flows": rows, "other": other}


class TcpSeq:
    """The sequence ranges a TCP flow has covered, relative to the first segment seen.

    Ranges, not a high-water mark: a segment lost before the capture point
    leaves a gap that its retransmission fills for the first time here.
    """

    def __init__(self, first_seq: int):
        self.base = first_seq
        self.ranges: list[list[int]] = []  # disjoint, sorted [start, end)

    def seen_again(self, seq: int, length: int) -> int:
        """Bytes of the segment [seq, seq + length) already covered; records the segment."""
        start = (seq - self.base) % (1 << 32)
        if start >= 1 << 31:  # before the first segment captured
            start -= 1 << 32
        end = start + length
        again = sum(max(0, min(end, b) - max(start, a)) for a, b in self.ranges)
        merged = []
        for a, b in self.ranges:
            if b < start or a > end:
                merged.append([a, b])
            else:
                start, end = min(start, a), max(end, b)
        merged.append([start, end])
        self.ranges = sorted(merged)
        return again


IP_PROTOS = {0: "hopopt", 1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6"}


def _five_tuple(pkt, IP, IPv6, TCP, UDP):
    """((proto, src, sport, dst, dport), payload bytes, TCP seq or None); (None, 0, None) if not IP."""
    if IP in pkt:
        ip = pkt[IP]
        src, dst, l3_payload, proto = ip.src, ip.dst, ip.len - ip.ihl * 4, ip.proto
    elif IPv6 in pkt:
        ip = pkt[IPv6]
        src, dst, l3_payload, proto = ip.src, ip.dst, ip.plen, ip.nh
    else:
        return None, 0, None
    if TCP in pkt:
        tcp = pkt[TCP]
        return ("tcp", src, tcp.sport, dst, tcp.dport), max(0, l3_payload - tcp.dataofs * 4), tcp.seq
    if UDP in pkt:
        udp = pkt[UDP]
        return ("udp", src, udp.sport, dst, udp.dport), max(0, l3_payload - 8), None
    return (IP_PROTOS.get(proto, str(proto)), src, None, dst, None), max(0, l3_payload), None


def print_stats(stats: dict, out) -> None:
    n, dur = stats["packets"], (stats["last"] - stats["first"]) if stats["packets"] else 0.0
    rate = f", {stats['bytes'] * 8 / dur / 1e6:.2f} Mb/s" if dur > 0 else ""
    out.write(f"{stats['file']}: {n} packets, {_fmt_bytes(stats['bytes'])} in {dur:.3f} s{rate}; "
              f"{len(stats['flows'])} flows\n")
    if stats["flows"]:
        t0 = stats["first"]
        width = max(22, *(len(_end(f[a], f[p])) + 2 for f in stats["flows"] for a, p in (("src", "sport"),
                                                                                            ("dst", "dport"))))
        out.write(f"  {'proto':<7}{'source':<{width}}{'destination':<{width}}{'packets':>9}{'bytes':>11}"
                  f"{'payload':>11}{'again':>10}{'first s':>10}{'last s':>10}{'Mb/s':>9}\n")
        for f in stats["flows"]:
            rate = f"{f['rate_mbps']:.2f}" if f["rate_mbps"] is not None else "-"
            out.write(f"  {f['proto']:<7}{_end(f['src'], f['sport']):<{width}}{_end(f['dst'], f['dport']):<{width}}"
                      f"{f['packets']:>9}{_fmt_bytes(f['bytes']):>11}{_fmt_bytes(f['payload_bytes']):>11}"
                      f"{_fmt_bytes(f['retrans_bytes']):>10}{f['first'] - t0:>10.3f}{f['last'] - t0:>10.3f}{rate:>9}\n")
    if stats["other"]["packets"]:
        out.write(f"  not IP: {stats['other']['packets']} packets, {_fmt_bytes(stats['other']['bytes'])}\n")
    out.write(f"  total: {n} packets, {_fmt_bytes(stats['bytes'])}; 'again': TCP payload already seen "
              "(retransmitted); times from the first packet; emulated (wall-clock) rates\n")


def _end(addr: str, port) -> str:
    return addr if port is None else (f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}")


def _fmt_bytes(n: int) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n} B"


def main(path: str, as_json: bool, out) -> int:
    stats = read_flows(path)
    if as_json:
        out.write(json.dumps(stats, indent=1) + "\n")
    else:
        print_stats(stats, out)
    return 0
