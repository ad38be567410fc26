"""The sender's gate below TCP in the ns-3 driver: TCP Small Queues (a connection's bytes between
TCP and the wire) and pacing (a host's rate cap, set and lifted at given times), on one link where
the sender's own NIC is the bottleneck, so that its queue is where a window would wait."""
from __future__ import annotations

import pytest

from experiment.transport import Ecn
from packetsim import ns3, scenario
from packetsim.transport import TSQ_MAX_BYTES, Transport
from tests.unit.packetsim.test_packetsim_engine import GOODPUT, MTU, fake_net, simulate

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
SEGMENT = MTU - 52


def test_the_tsq_limit_is_a_millisecond_of_the_nic_at_least_two_segments_at_most_linux_cap():
    t = Transport()
    assert t.tsq_bytes(0.01) == 2 * SEGMENT                  # 10 Mb/s (the emulator's): 1,220 B a ms
    assert t.tsq_bytes(10.0) == int(10e9 / 8 / 1024)         # 1,220,703 B
    assert t.tsq_bytes(400.0) == TSQ_MAX_BYTES               # 48.8 MB a ms: Linux's cap
    assert Transport(tsq=False).tsq_bytes(10.0) == 0


def _host_port(res):
    return next(q for q in res["queues"] if q["link"] == 0 and q["dir"] == 0)  # h0's NIC toward h1


@needs_ns3
@pytest.mark.parametrize("gbps,size", [(1.0, 5_000_000), (0.01, 1_000_000)])  # 122,070 B; two segments
def test_tsq_keeps_the_senders_nic_queue_at_its_limit_at_full_rate(tmp_path, gbps, size):
    net = fake_net(["h0", "h1"], [(0, 1, gbps)])
    ideal = size / (gbps * 1e9 / 8 * GOODPUT)
    limit = Transport().tsq_bytes(gbps)
    q = {}
    for tsq in (True, False):
        res = simulate(net, [([0, 1], size)], tmp_path / str(tsq), buffer=8 << 20, tsq=tsq)
        assert ideal <= res["tasks"][0]["end"] <= 1.01 * ideal, (tsq, res["tasks"][0]["end"], ideal)
        q[tsq] = _host_port(res)["max"]
    # Below TCP: at most the limit plus the segment that crossed it, less what is on the wire
    # (IP bytes in the queue: 52 header bytes a segment more than its payload).
    assert q[True] <= (limit // SEGMENT + 1) * MTU, (q, limit)
    assert q[False] > 2 * q[True], q  # without TSQ the window waits in the NIC queue


def _paced(tmp_path, share, until_s):
    """A 20 MB flow on one 10 Gb/s link, paced to share x the line rate from 0 until until_s."""
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    sc_paces = [(0, share * 10e9 / 8, 0.0, until_s)] if share else []
    return simulate(net, [([0, 1], 20_000_000)], tmp_path, paces=sc_paces)


@needs_ns3
def test_a_pace_of_one_half_halves_the_rate_and_lifted_it_returns(tmp_path):
    until = 8e-3
    res = _paced(tmp_path, 0.5, until)
    bins = _host_port(res)["bins"]  # wire bytes a 1 ms bin
    line = 10e9 / 8 * 1e-3
    paced = bins[1:7]   # inside the pace, past TCP's start
    after = bins[9:14]  # after it ends, before the flow's tail
    # Payload at half the line rate: its frames at half of it x (MTU + 2) / (MTU - 52).
    for b in paced:
        assert abs(b / (0.5 * line / GOODPUT) - 1) < 0.03, (paced, line)
    for b in after:
        assert abs(b / line - 1) < 0.03, (after, line)
    # Hand-computed end: 8 ms at half the goodput, the rest at the full goodput.
    goodput = 10e9 / 8 * GOODPUT
    want = until + (20_000_000 - 0.5 * 10e9 / 8 * until) / goodput
    assert abs(res["tasks"][0]["end"] / want - 1) < 0.02, (res["tasks"][0]["end"], want)


def test_emulated_units_scale_a_pace_as_every_rate_and_time():
    from experiment.model import Scale
    sc = scenario.Scenario()
    sc.paces = [(3, 1e9, 0.001, 0.002)]
    from packetsim import emulated
    emulated.to_emulated(sc, None, Scale(link=2.5e-5, bytes=1e-3))
    (node, Bps, a, z), = sc.paces
    assert node == 3 and Bps == pytest.approx(2.5e4) and a == pytest.approx(0.04) and z == pytest.approx(0.08)


@needs_ns3
@pytest.mark.parametrize("ports", ["fifo", "ecn", "htb"])  # a plain FIFO port, ECN's queue discs, the emulator's HTB
def test_a_hosts_own_queue_holds_what_tsq_lets_through_and_loses_nothing(tmp_path, ports):
    # Eight connections leave h0 at once, each allowed 122,070 B below TCP at 1 Gb/s, into a
    # buffer of 64 KiB: Linux holds in the socket what its qdisc has no room for (a local drop is
    # not a loss), so h0's port may queue past the buffer but drops nothing; the switch's port
    # toward h1 still drops at the buffer when two senders fill it.
    net = fake_net(["h0", "s0", "h1", "h2"], [(0, 1, 1.0), (1, 2, 1.0), (3, 1, 1.0)])
    size, buffer = 1_000_000, 64 << 10
    extra = {"fifo": {}, "htb": {"htb_burst_s": 1e-4},
             "ecn": {"ecn": Ecn(min_bytes=32 << 10, max_bytes=48 << 10, max_prob=1.0), "cc": "dctcp"}}[ports]
    res = simulate(net, [([0, 1, 2], size)] * 8, tmp_path / "one", buffer=buffer, **extra)
    nic = next(q for q in res["queues"] if q["link"] == 0 and q["dir"] == 0)
    assert nic["drops"] == 0 and nic["max"] > buffer, nic
    ideal = 8 * size / (1e9 / 8 * GOODPUT)
    assert max(t["end"] for t in res["tasks"]) <= 1.03 * ideal
    if ports != "ecn":
        two = simulate(net, [([0, 1, 2], size)] * 4 + [([3, 1, 2], size)] * 4, tmp_path / "two", buffer=buffer,
                       **extra)
        port = next(q for q in two["queues"] if q["link"] == 1 and q["dir"] == 0)  # s0 toward h1
        assert port["drops"] > 0, port
        assert all(q["drops"] == 0 for q in two["queues"] if q["link"] in (0, 2) and q["dir"] == 0)
