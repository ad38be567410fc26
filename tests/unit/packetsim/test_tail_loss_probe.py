"""Tail-loss probes (transport.tcp.tail_loss_probe) on hand-computable cases: a flow whose last
segments are lost on a cable cut for a while. Without the probe nothing is left to raise three
duplicate ACKs and the sender waits for the 200 ms minimum RTO; with it, a probe leaves
2 x SRTT + 2 ms (Linux's floor) after the last ACK, its SACK marks the rest lost and fast
recovery resends them."""
from __future__ import annotations

import json
import os

import pytest

from dtnet.cli import main
from packetsim import ns3, runner, scenario
from packetsim.transport import TLP_FLOOR_S, Transport
from tests.unit.packetsim.test_packetsim_engine import fake_net, path, ring, write

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
SEGMENT = 8948  # MTU 9000 less headers


def _cut_tail(tmp_path, segments: int, down_s: float, up_s: float, tlp: bool, rack=True, more=(), tail_bytes=0,
              latency_us=1.0, loss_detection="dupack"):
    """One flow h0 -> h1 (10 Gb/s, latency_us) of `segments` full segments and tail_bytes more, ready
    at t0; the cable is cut from down_s until up_s (both ends drop what arrives, ACKs too), and goes
    down or up at the (at_s, up) of `more`. rack: RACK's rule for the oldest segment with the probe;
    loss_detection: the transport's. The driver's results."""
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    sc = scenario.Scenario()
    c = sc.conn(0, 0, 1, ["h0", "h1"])
    sc.add(scenario.TRANSFER, segments * SEGMENT + tail_bytes, conn=c)
    sc.paths.append(path(net, [0, 1]))
    both = path(net, [0, 1]).tolist() + path(net, [1, 0]).tolist()
    sc.linkstates = [(down_s, both, False), (up_s, both, True)] + [(at, both, up) for at, up in more]
    sc.slice_bytes, sc.bin_s = 1, 1e-3
    os.makedirs(tmp_path, exist_ok=True)
    t = Transport(switch_buffer_bytes=4 << 20, latency_us={"host": latency_us}, tail_loss_probe=tlp, tlp_rack=rack,
                  loss_detection=loss_detection)
    return runner.execute(sc, net, t, str(tmp_path))[0]


@needs_ns3
def test_a_lost_tail_is_probed_after_two_round_trips_and_2_ms_not_after_the_200_ms_rto(tmp_path):
    # 30 segments take about 0.25 ms; the cable is down from 0.15 ms (the tail and its ACKs are
    # lost) until 1 ms, before any probe. The round trip is tens of us (a window of at most a few
    # dozen frames of 7.2 us queued at h0's NIC), so the probe leaves between 2 ms and 2.5 ms after
    # the last ACK, and recovery resends the tail in a few round trips: the end, 2 to 3 ms after
    # the cut. Without the probe: the receiver's delayed ACK of the odd segment it had before the
    # cut leaves after 40 ms and restarts the RTO, which fires 200 ms later; the one segment it
    # resends is ACKed after another 40 ms, and slow start sends the rest: 280 ms after the cut.
    down, up = 150e-6, 1e-3
    delack_s = Transport().delack_s
    ends, runs = {}, {}
    for tlp in (False, True):
        res = runs[tlp] = _cut_tail(tmp_path / str(tlp), 30, down, up, tlp)
        assert res["meta"]["tasks_done"] == 1 and res["conns"][0]["bytes"] == 30 * SEGMENT, res["meta"]
        assert res["conns"][0]["retx"] > 1, res["conns"]  # the tail was lost and sent again
        ends[tlp] = res["tasks"][0]["end"]
    no_probe = down + delack_s + runner.RTO_MIN_S + delack_s
    assert no_probe - 1e-3 <= ends[False] <= no_probe + 1e-3, ends
    assert "probes" not in runs[False]["conns"][0]  # off: the driver is the one it was
    assert down + TLP_FLOOR_S <= ends[True] <= down + TLP_FLOOR_S + 1e-3, ends
    assert runs[True]["conns"][0]["probes"] == 1  # one probe, then fast recovery: no second one


@needs_ns3
def test_one_segment_out_waits_for_a_delayed_ack_so_the_rto_comes_first(tmp_path):
    # A flow of one segment, cut from t0 until 1 ms: the only segment is lost. With one segment
    # out the PTO is 2 x SRTT + the minimum RTO (a delayed ACK may be due, RFC 8985 7.2): past the
    # RTO (200 ms since the segment left), so the RTO resends it at 200 ms, as without the probe
    # (Linux would send its probe at that instant). Without the allowance it would go at 2 ms.
    res = _cut_tail(tmp_path, 1, 0.0, 1e-3, True)
    end = res["tasks"][0]["end"]
    assert res["meta"]["tasks_done"] == 1 and res["conns"][0]["probes"] == 0, res["conns"]
    assert runner.RTO_MIN_S <= end <= runner.RTO_MIN_S + 1e-4, end


def scenario_lines(tmp_path, name: str, t: Transport) -> list[str]:
    """The scenario file of one flow of one segment over one 10 Gb/s cable, with transport t."""
    net = fake_net(["h0", "h1"], [(0, 1, 10.0)])
    sc = scenario.Scenario()
    c = sc.conn(0, 0, 1, ["h0", "h1"])
    sc.add(scenario.TRANSFER, SEGMENT, conn=c)
    sc.paths.append(path(net, [0, 1]))
    f = tmp_path / f"{name}.txt"
    scenario.write(sc, net, t, str(f), seed=1, bin_s=1e-3, end_s=1.0, rto_min_s=0.2)
    return f.read_text().splitlines()


def test_the_scenario_asks_for_probes_only_when_the_transport_does(tmp_path):
    lines = {tlp: [ln for ln in scenario_lines(tmp_path, f"s{tlp}", Transport(tail_loss_probe=tlp))
                   if ln.startswith("tlp")] for tlp in (False, True)}
    assert lines == {False: [], True: [f"tlp {TLP_FLOOR_S!r} 0.2 1"]}


@needs_ns3
def test_summary_says_whether_tails_are_probed(tmp_path):
    for tlp in (False, True):
        out = tmp_path / f"out{tlp}"
        data = ring(size=1 << 20, transport={"tcp": {"tail_loss_probe": tlp}})
        assert main(["run", write(tmp_path, data, f"ring{tlp}.yaml"), "--out", str(out)]) == 0
        s = json.loads((out / "summary.json").read_text())
        assert s["model"]["transport"]["tail_loss_probe"] is tlp
        said = [x for x in s["model"]["statements"] if "tail-loss probe" in x]
        assert len(said) == 1 and said[0].startswith("tail-loss probes" if tlp else "no tail-loss probe"), said
        assert all(("loss_probes" in f) is tlp for f in s["flows"])


@needs_ns3
def test_a_retransmission_lost_in_recovery_is_sent_again_once_later_segments_are_sacked(tmp_path):
    # The case above, and a second cut of 1 us that takes only the first segment fast recovery
    # resends after the probe (it reaches h1 2.266 ms after t0; the probe and recovery times are the
    # first run's, fixed by the simulation). ns-3 alone waits for the RTO, restarted by the probe
    # (about 202 ms); with RACK's rule for the oldest segment out, a later-sent segment's SACK
    # (a few us later) marks it lost again and it is resent at once.
    ends = {}
    for rack in (False, True):
        res = _cut_tail(tmp_path / str(rack), 30, 150e-6, 1e-3, True, rack=rack,
                        more=[(2.2655e-3, False), (2.2667e-3, True)])
        assert res["meta"]["tasks_done"] == 1 and res["conns"][0]["probes"] == 1, res["conns"]
        ends[rack] = res["tasks"][0]["end"]
    assert ends[False] >= runner.RTO_MIN_S, ends
    assert ends[True] <= 150e-6 + TLP_FLOOR_S + 1e-3, ends


@needs_ns3
def test_a_lost_segment_sent_with_the_sacked_tail_is_marked_lost_once_a_quarter_min_rtt_has_passed(tmp_path):
    # One full segment and a 1,000-byte tail leave together at t0 (the initial window): the full one's frame
    # (9,002 bytes, 7.2 us at 10 Gb/s, + 1 us) reaches h1 at 8.2 us, the tail's at 9.0 us. The cable is down
    # from 2 us (the handshake's last ACK is through) until 8.6 us: only the full segment is lost. The tail's
    # SACK (one duplicate ACK, 10.1 us after t0) comes from a segment sent at the same instant as the lost one,
    # not a quarter of the minimum RTT (the handshake's 2.09 us / 4) after it, so RACK's rule does not mark it
    # at once, ns-3 needs three SACKed segments, and the probe is not sent outside Open. Linux arms RACK's
    # reordering timer: the wait left (0.52 us) + 2 ms (TCP_TIMEOUT_MIN); it marks the segment lost and recovery
    # resends it: at 2.0107 ms, ACKed at 2.0189 ms. Without that timer the RTO resends it at 200 ms.
    res = _cut_tail(tmp_path, 1, 2e-6, 8.6e-6, True, tail_bytes=1000)
    assert res["meta"]["tasks_done"] == 1 and res["conns"][0]["bytes"] == SEGMENT + 1000, res["meta"]
    assert res["conns"][0]["retx"] == 1 and res["conns"][0]["probes"] == 0, res["conns"]
    end = res["tasks"][0]["end"]
    assert TLP_FLOOR_S + 10e-6 <= end <= TLP_FLOOR_S + 30e-6, end  # 10.1 + 0.5 + 8.2 us past the 2 ms
