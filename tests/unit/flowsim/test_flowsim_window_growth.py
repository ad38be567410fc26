"""TCP's growing window (flow.window_growth, flowsim.window): cwnd by hand, one connection's
rounds by hand (a fluid sliding window: in flight = what was sent in the last RTT), and the
option through an experiment file."""
import json

import pytest
import yaml

from dtnet.cli import main
from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from flowsim.window import CwndLaw
from topologies import single_switch
from traffic.trace import Op, Trace

MSS = 8948.0
W0 = 10 * MSS


def test_cwnd_law_by_hand():
    ss = CwndLaw("slow-start", MSS)
    assert ss.cwnd(0) == W0 and ss.cwnd(5 * MSS) == 15 * MSS and ss.slope(1e9) == 1.0
    cubic = CwndLaw("cubic", MSS)
    assert cubic.cwnd(6 * MSS) == pytest.approx(16 * MSS)         # HyStart's low window ends slow start
    assert cubic.cwnd(26 * MSS) == pytest.approx(17 * MSS)        # then a segment per 20 acked
    assert cubic.slope(5 * MSS) == 1.0 and cubic.slope(7 * MSS) == pytest.approx(1 / 20)
    assert cubic.kinks() == [pytest.approx(6 * MSS)]
    capped = CwndLaw("cubic", MSS, max_bytes=12 * MSS)           # a fixed window bounds the growth
    assert capped.cwnd(10 * MSS) == 12 * MSS and capped.slope(10 * MSS) == 0.0
    assert capped.kinks() == [pytest.approx(2 * MSS), pytest.approx(6 * MSS)]
    with pytest.raises(ValueError):
        CwndLaw("reno", MSS)
    with pytest.raises(ValueError):
        Params(window_growth="reno")


def one_send_end_s(size, growth, latency_s=100e-6, gbps=400, window_bytes=None):
    """When one send of size bytes is delivered over one switch (two links at gbps)."""
    fab = single_switch(2, link_gbps=gbps)
    ops = {0: [Op("x", "send", (), size_bytes=size, peer=1)], 1: [Op("x", "recv", (), size_bytes=size, peer=0)]}
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, Trace(nranks=2, groups={}, ops=ops))],
                     EcmpRouter(0), Params(latency_s=latency_s, window_growth=growth, mss_bytes=MSS,
                                           window_bytes=window_bytes)).run()
    return max(e["end"] for e in res.op_events())


def test_slow_start_rounds_by_hand():
    # B x RTT (10 MB) far above the window. Round 1: W0 at B, then the window is full and the ACKs
    # are an RTT away. At RTT they return at B for W0 / B, each acked byte adds one to cwnd, so the
    # sender goes on at B until in flight (W0) meets cwnd (2 W0): 3 W0 sent by RTT + 2 W0 / B.
    B, L = 400e9 / 8, 100e-6
    rtt = 2 * L
    assert one_send_end_s(3 * W0, "none") == pytest.approx(3 * W0 / B + L, rel=1e-9)
    assert one_send_end_s(3 * W0, "slow-start") == pytest.approx(rtt + 2 * W0 / B + L, rel=1e-9)
    # One byte more waits for the next round: its ACKs (of the 2 W0 sent from RTT on) come at 2 RTT.
    assert one_send_end_s(3 * W0 + 1000, "slow-start") == pytest.approx(2 * rtt + 1000 / B + L, rel=1e-6)


def test_cubic_rounds_by_hand():
    # As above, but cwnd grows one byte per byte acked only up to 16 segments (6 segments acked),
    # then one per 20: when the first W0 is acked, cwnd = 16 + 4 / 20 = 16.2 segments, in flight
    # 10, so the sender goes on until 16.2 are in flight: 26.2 segments by RTT + 16.2 MSS / B.
    B, L = 400e9 / 8, 100e-6
    rtt = 2 * L
    assert one_send_end_s(26.2 * MSS, "cubic") == pytest.approx(rtt + 16.2 * MSS / B + L, rel=1e-9)
    assert one_send_end_s(26.2 * MSS + 1000, "cubic") > 2 * rtt


def test_window_bytes_bounds_the_growing_window():
    # cwnd stops at 12 segments (2 acked): at RTT the sender goes on at B while in flight (10) is
    # under cwnd, through the return of the first 10, then to 12 in flight: 22 by RTT + 12 MSS / B.
    B, L = 400e9 / 8, 100e-6
    end = one_send_end_s(22 * MSS, "cubic", window_bytes=12 * MSS)
    assert end == pytest.approx(2 * L + 12 * MSS / B + L, rel=1e-9)
    assert one_send_end_s(22 * MSS + 1000, "cubic", window_bytes=12 * MSS) > 4 * L


def test_no_window_where_the_path_holds_less_than_the_initial_window():
    # 40 Gb/s x 2 x 5 us = 50 kB < 10 segments: the window never binds, the answer is unchanged.
    size = 100 * MSS
    assert one_send_end_s(size, "cubic", latency_s=5e-6, gbps=40) == one_send_end_s(size, "none", 5e-6, 40)
    assert one_send_end_s(size, "cubic", latency_s=0.0) == one_send_end_s(size, "none", latency_s=0.0)


def ring_file(tmp_path, flow):
    exp = {"name": "ring", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 16, "link_gbps": 400},
           "transport": {"latency_us": {"host": 10, "fabric": 10, "nvlink": 0}},
           "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_reduce", "algorithm": "ring",
                                                                 "size_bytes": 4 << 20, "iterations": 1}}],
           "flow": flow}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return str(path)


def test_cubic_through_a_file_slows_a_latency_bound_ring(tmp_path):
    cct = {}
    for growth in ("none", "cubic"):
        assert main(["run", ring_file(tmp_path, {"window_growth": growth}), "--out", str(tmp_path / growth)]) == 0
        s = json.loads((tmp_path / growth / "summary.json").read_text())
        assert s["model"]["window_growth"] == growth
        cct[growth] = s["jobs"][0]["collectives"][0]["cct_s"]
    # 30 steps of 256 KiB, one way 20 us: without a window each step streams a 16 KiB slice behind
    # the one before, so each costs 20 us + a slice (0.33 us), and the last chunk's rest follows;
    # with cubic's window (17 to 50 segments here, under the step at first) the early steps wait for
    # ACKs, at most two round trips each (a 10-segment window takes three to send 256 KiB).
    chunk, slice_b, rtt = (4 << 20) / 16, 16384, 40e-6
    assert cct["none"] == pytest.approx(30 * (20e-6 + slice_b / 50e9) + (chunk - slice_b) / 50e9, rel=1e-6)
    assert 1.4 < cct["cubic"] / cct["none"] and cct["cubic"] < cct["none"] + 30 * 2 * rtt
    assert any("window growth cubic" in x for x in s["model"]["statements"])


@pytest.mark.parametrize("bad", ["reno", 1, True])
def test_bad_window_growth_is_a_one_line_error(tmp_path, capsys, bad):
    assert main(["check", ring_file(tmp_path, {"window_growth": bad})]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "flow.window_growth" in err and "Traceback" not in err
