"""The driver's timers on hand-computable cases: the delayed-ACK timeout (packetsim.transport's 40 ms,
not ns-3's 200 ms) and the trickle detector (a run delivering under 0.1% of its slowest link for
10 s of simulated time with no compute running is stopped, and says which connections owe bytes)."""
from __future__ import annotations

import os

import pytest

from packetsim import ns3, runner, scenario
from packetsim.transport import Transport
from tests.unit.packetsim.test_packetsim_engine import fake_net, path, simulate

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")


def _transfer_then_compute(tmp_path, transport: Transport):
    """On one connection h0 -> h1: 20 segments, then 0.3 s of compute. The receiver ACKs every
    second segment (ns-3's DelAckMaxCount 2); the ACKs give the sender its RTT, so a 200 ms RTO,
    and the last segment, odd one out (the first ACK covers the handshake's), waits for the
    delayed-ACK timer. The compute outlasts that RTO."""
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    sc = scenario.Scenario()
    c = sc.conn(0, 0, 1, ["h0", "h1"])
    x = sc.add(scenario.TRANSFER, 20 * 8948, conn=c)
    sc.add(scenario.COMPUTE, dur=0.3, earlier=[x])
    sc.paths.append(path(net, [0, 1]))
    sc.slice_bytes, sc.bin_s = 1, 1e-3
    os.makedirs(tmp_path, exist_ok=True)
    return runner.execute(sc, net, transport, str(tmp_path))[0]


@needs_ns3
def test_the_last_segments_delayed_ack_comes_before_the_senders_timeout(tmp_path):
    # The last segment's ACK leaves after delack_s. 40 ms (the default, Linux's floor) is far inside
    # the 200 ms minimum RTO: no retransmission. ns-3's own 200 ms races the RTO and loses: a
    # spurious retransmission. A default that regressed to 200 ms fails the first run's assertion.
    res = _transfer_then_compute(tmp_path / "default", Transport(latency_us={"host": 1.0}))
    assert res["tasks"][1]["end"] > 0.3 and res["conns"][0]["retx"] == 0, res["conns"]
    slow = _transfer_then_compute(tmp_path / "ns3", Transport(latency_us={"host": 1.0}, delack_s=0.2))
    assert slow["conns"][0]["retx"] >= 1, slow["conns"]


@needs_ns3
def test_the_trickle_detector_stops_a_crawling_flow_and_names_it(tmp_path):
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    floor_Bps = 1e-3 * 10e9 / 8  # 0.1% of the slowest link: 1.25 MB/s
    # Paced at 0.4 of the floor: 10 MB would take 20 s; the detector stops it after a 10 s window.
    res = simulate(net, [([0, 1], 10_000_000)], tmp_path / "slow", paces=[(0, 0.4 * floor_Bps, 0.0, 1e9)])
    meta = res["meta"]
    assert meta["tasks_done"] == 0 and meta["stall"].startswith("trickling"), meta
    assert "connections owing bytes: 0 (" in meta["stall"]
    assert 10 <= meta["sim_end"] <= 21, meta
    # At 2x the floor it is slow but not a trickle: 25 MB in 10 s, to the end.
    res = simulate(net, [([0, 1], 25_000_000)], tmp_path / "ok", paces=[(0, 2 * floor_Bps, 0.0, 1e9)])
    assert res["meta"]["tasks_done"] == 1 and res["meta"]["stall"] == "", res["meta"]
    assert 9.9 <= res["tasks"][0]["end"] <= 10.5


@needs_ns3
def test_a_long_compute_phase_is_not_a_trickle(tmp_path):
    # Nothing delivered for 15 s of simulated time, but a rank computes: the run goes on to its end.
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    sc = scenario.Scenario()
    c = sc.conn(0, 0, 1, ["h0", "h1"])
    comp = sc.add(scenario.COMPUTE, dur=15.0)
    sc.add(scenario.TRANSFER, 1_000_000, conn=c, earlier=[comp])
    sc.paths.append(path(net, [0, 1]))
    sc.slice_bytes, sc.bin_s = 1, 1e-2
    res = runner.execute(sc, net, Transport(latency_us={"host": 1.0}), str(tmp_path))[0]
    assert res["meta"]["tasks_done"] == 2 and res["meta"]["stall"] == "" and res["tasks"][1]["end"] > 15
