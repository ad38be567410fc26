"""The transport the packet engine runs: the one place that reads the experiment's settings.

It reads the engine-neutral `transport:` section (experiment.transport) and fills in what the
file leaves out with the defaults below.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from experiment.transport import DEFAULT_SWITCH_BUFFER_BYTES, Ecn

CCS = ("newreno", "cubic", "dctcp", "bbr")

# TCP Small Queues, as Linux (net/ipv4/tcp_output.c, tcp_small_queue_check): a socket may have at
# most max(two packets, its pacing rate >> sk_pacing_shift 10, about 1 ms) queued below it in the
# qdisc and NIC, and never more than net.ipv4.tcp_limit_output_bytes. ns-3 has no TSQ: without it
# a sender's whole window waits in its own NIC queue, the RTT of every flow on that NIC climbs and
# retransmission timers fire for nothing. The driver takes the link rate as the pacing rate.
SEND_BUFFER_BYTES = 4 << 20  # every sender socket's (the driver's SndBufSize): Linux's tcp_wmem maximum
TSQ_WINDOW_S = 1.0 / 1024
TSQ_MIN_SEGMENTS = 2
TSQ_MAX_BYTES = 4 << 20  # /proc/sys/net/ipv4/tcp_limit_output_bytes on the emulator's kernel here (6.18)

# The tail-loss probe's timeout, as Linux computes it (net/ipv4/tcp_output.c, tcp_schedule_loss_probe):
# 2 x SRTT plus TLP_FLOOR_S (TCP_TIMEOUT_MIN_US, the floor of its timers), or plus the minimum RTO
# when one segment is out (RFC 8985's allowance for a delayed ACK); never past the RTO.
TLP_FLOOR_S = 0.002


@dataclass(frozen=True)
class Transport:
    cc: str = "cubic"
    mtu_bytes: int = 9000
    switch_buffer_bytes: int = DEFAULT_SWITCH_BUFFER_BYTES  # per output port
    ecn: Ecn | None = None  # experiment.transport's, as the file gives it
    latency_us: dict = field(default_factory=dict)  # link kind (host, fabric, nvlink) -> one-way us
    spray: bool = False
    ack_priority: bool = False  # pure ACKs ahead of data at every port, as the emulator's shaping
    # Linux's delayed-ACK timer floor (TCP_DELACK_MIN). ns-3's 200 ms default equals the minimum
    # RTO: after a timeout each lone segment's ACK came as the RTO fired again (incast rounds of
    # 30 s, spurious retransmissions after every idle phase in emulated units).
    delack_s: float = 0.04
    ack_every_segments: int = 2  # ns-3's DelAckCount and RFC 1122's; experiment.transport.Tcp says why more
    # > 0: shape every link as the emulator's HTB (a token bucket bursting this much traffic, at
    # least two frames, over a wire 100x faster); 0: the wire itself at the link's rate
    htb_burst_s: float = 0.0
    tsq: bool = True  # TCP Small Queues at every sender (tsq_bytes): Linux has them on every socket
    tail_loss_probe: bool = False  # RFC 8985's probe (ns-3 3.37 has none): opt-in, docs/packet-engine.md
    tlp_floor_s: float = TLP_FLOOR_S
    # with the probe, RACK's rule for the oldest segment out (RFC 8985 6.2): a retransmission lost
    # in recovery is sent again once later segments are SACKed, not after the RTO (off: the probe alone)
    tlp_rack: bool = True
    # "rack": RFC 8985's RACK marks losses for every segment, in place of ns-3's DupThresh rule (with
    # the probe: settings() turns it on); "dupack": ns-3's three SACKed segments. docs/packet-engine.md
    loss_detection: str = "dupack"
    # False: every plain FIFO port as ns-3 builds it, a queue disc feeding the device's queue of two
    # frames; True: the driver's PortQueue, the same results with an event fewer a frame a hop
    port_queue: bool = True

    def __post_init__(self):
        if self.loss_detection == "rack" and not self.tail_loss_probe:
            raise ValueError("loss_detection rack runs in the probe's socket: tail_loss_probe must be on")

    def tsq_bytes(self, nic_gbps: float) -> int:
        """A connection's TSQ limit, payload bytes below TCP, when it leaves by a NIC of nic_gbps:
        about 1 ms at that rate, at least two segments, at most TSQ_MAX_BYTES; 0 with tsq off."""
        if not self.tsq:
            return 0
        seg = self.mtu_bytes - 52
        return int(min(TSQ_MAX_BYTES, max(TSQ_MIN_SEGMENTS * seg, nic_gbps * 1e9 / 8 * TSQ_WINDOW_S)))


def settings(exp) -> Transport:
    """The experiment's transport: section (experiment.transport), each key it leaves out at the
    packet engine's default; a link kind without latency gets topology.latency_us on host and
    fabric links, as the other engines delay them. Spraying is the policy's choice."""
    from controller.registry import trait

    t = exp.transport
    lat = {"host": exp.latency_us, "fabric": exp.latency_us, "nvlink": 0.0}
    if t.latency_us is not None:
        lat = {k: t.latency_us.of(k) for k in lat}
    d = Transport()
    return Transport(cc=t.tcp.cc or d.cc, ack_every_segments=t.tcp.ack_every_segments or d.ack_every_segments,
                     **loss_settings(t), mtu_bytes=t.mtu_bytes or d.mtu_bytes,
                     switch_buffer_bytes=t.switch_buffer_bytes or d.switch_buffer_bytes,
                     ecn=t.ecn,
                     latency_us=lat, spray=trait(exp.routing, "sprays"))


def loss_settings(t) -> dict:
    """Transport keywords for the file's tcp.tail_loss_probe and tcp.loss_detection (t:
    experiment.transport's section): rack brings the probe unless the file said false (refused)."""
    rack = t.tcp.loss_detection == "rack"
    return {"tail_loss_probe": bool(t.tcp.tail_loss_probe) or rack, "loss_detection": "rack" if rack else "dupack"}
