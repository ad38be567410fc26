"""Timeouts where first windows overflow a port (flow.losses, flowsim.losses): the peak queue
and the share rule by hand, N senders into one port against the closed form the model
implements, and the option through an experiment file."""
import json

import pytest
import yaml

from dtnet.cli import main
from experiment.model import LOSS_MODELS
from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from flowsim.losses import LOSS_MODELS as FLOW_LOSS_MODELS, BurstLosses, peak_queue_bytes
from topologies import single_switch
from traffic.trace import Op, Trace

GBPS = 10
B = GBPS * 1e9 / 8           # the port's rate, bytes/s
MTU, MSS = 1500.0, 1460.0
W_WIRE = 10 * MTU            # a first window of 10 full segments on the wire


def test_peak_queue_by_hand():
    # Four senders at B into a port at B, 10 frames each: they end together at W/B, having sent
    # 4W while the port drained W.
    assert peak_queue_bytes([W_WIRE] * 4, [B] * 4, B) == pytest.approx(3 * W_WIRE)
    # Arrivals no faster than the drain build nothing (an all-to-all's receiver: n senders at B/n).
    assert peak_queue_bytes([W_WIRE] * 8, [B / 8] * 8, B) == 0.0
    # Unequal: one sender of W at B and one of W/2 at B/2 (both end at W/B): 1.5 W in, W out.
    assert peak_queue_bytes([W_WIRE, W_WIRE / 2], [B, B / 2], B) == pytest.approx(W_WIRE / 2)
    # One of W at B and one of W at B/4: the peak is when the fast one ends (at W/B: W + W/4 in, W out),
    # after which the slow one alone (B/4) drains it.
    assert peak_queue_bytes([W_WIRE, W_WIRE], [B, B / 4], B) == pytest.approx(W_WIRE / 4)


def test_share_rule_by_hand():
    lm = BurstLosses(buffer_bytes=32768, frame_bytes=MTU, mss_bytes=MSS)
    assert not lm.times_out(4)                # 8,192 B each: 5.5 frames, enough for three past a loss
    assert lm.times_out(8)                    # 4,096 B each: 2.7 frames
    assert not lm.times_out(8, bdp_bytes=16384)  # the bytes on the wire count too: 6,144 B each
    assert lm.first_window_wire_bytes([1e9, 2920])[0] == pytest.approx(W_WIRE)
    assert lm.first_window_wire_bytes([1e9, 2920])[1] == pytest.approx(2 * MTU)
    assert FLOW_LOSS_MODELS == LOSS_MODELS
    with pytest.raises(ValueError):
        BurstLosses(buffer_bytes=0, frame_bytes=MTU, mss_bytes=MSS)
    with pytest.raises(ValueError):
        Params(losses="timeouts")


def incast_end_s(n, size, buffer_bytes, losses=True):
    """When the last of n senders' size-byte sends into host 0 is delivered (one switch, 10 Gb/s)."""
    fab = single_switch(n + 1, link_gbps=GBPS)
    ops = {0: [Op("x", "recv", (), size_bytes=size, peer=s) for s in range(1, n + 1)]}
    for s in range(1, n + 1):
        ops[s] = [Op("x", "send", (), size_bytes=size, peer=0)]
    lm = BurstLosses(buffer_bytes=buffer_bytes, frame_bytes=MTU, mss_bytes=MSS) if losses else None
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, Trace(nranks=n + 1, groups={}, ops=ops))],
                     EcmpRouter(0), Params(losses=lm)).run()
    return max(e["end"] for e in res.op_events())


@pytest.mark.parametrize("n, buffer_bytes, timeout", [
    (4, 32768, False),    # overflows (peak 3 x 15 kB = 45 kB > 32 kB), 5.5 frames each: fast retransmit
    (8, 32768, True),     # overflows, 2.7 frames each: every sender waits its RTO
    (8, 131072, False),   # peak 105 kB fits
    (32, 131072, True),   # peak 465 kB, 2.7 frames each
])
def test_incast_goodput_against_the_closed_form(n, buffer_bytes, timeout):
    # The closed form: n x S at the port's rate, plus one minimum RTO when the first windows
    # overflow the buffer and each sender's share is under DupThresh + 1 frames.
    size = 262144
    peak = peak_queue_bytes([W_WIRE] * n, [B] * n, B)
    lm = BurstLosses(buffer_bytes=buffer_bytes, frame_bytes=MTU, mss_bytes=MSS)
    assert (peak > buffer_bytes and lm.times_out(n)) == timeout
    expected = n * size / B + (0.2 if timeout else 0.0)
    assert incast_end_s(n, size, buffer_bytes) == pytest.approx(expected, rel=1e-9)
    assert incast_end_s(n, size, buffer_bytes, losses=False) == pytest.approx(n * size / B, rel=1e-9)


def test_small_sends_fit_where_large_ones_overflow():
    # 8 senders of 2 frames each (3 kB on the wire): 24 kB arrive, 3 kB drain, under 32 KiB.
    assert incast_end_s(8, 2920, 32768) == pytest.approx(8 * 2920 / B, rel=1e-9)


def test_senders_share_their_nic():
    # An all-to-all of 9 hosts: each sends 8 first windows at once, each at 1/8 of its NIC, so
    # every receiver's port takes 8 x B/8 = B, its own rate, and queues nothing; the same 8
    # windows from 8 senders alone (incast) overflow 32 KiB and time out.
    n, size = 9, 262144
    fab = single_switch(n, link_gbps=GBPS)
    ops = {r: [Op("x", "send", (), size_bytes=size, peer=p) for p in range(n) if p != r]
           + [Op("x", "recv", (), size_bytes=size, peer=p) for p in range(n) if p != r] for r in range(n)}
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts, Trace(nranks=n, groups={}, ops=ops))],
                     EcmpRouter(0), Params(losses=BurstLosses(buffer_bytes=32768, frame_bytes=MTU, mss_bytes=MSS)))
    res = sim.run()
    assert sim.counters["overflows"] == 0 and sim.counters["timeouts"] == 0
    assert max(e["end"] for e in res.op_events()) < 0.2
    assert incast_end_s(n - 1, size, 32768) > 0.2


def test_option_through_a_file(tmp_path):
    spec = {"name": "incast8", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 9, "link_gbps": 10},
            "transport": {"mtu_bytes": 1500, "switch_buffer_bytes": 32768},
            "flow": {"losses": "timeouts"},
            "jobs": [{"name": "incast", "hosts": {"count": 9},
                      "workload": {"pattern": "incast", "dst": 0, "size_bytes": 262144, "request_bytes": 64,
                                   "iterations": 2}}]}
    path = tmp_path / "incast.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    model = s["model"]
    assert model["losses"] == {"losses": "timeouts", "overflows": 2, "timeouts": 16}
    assert "switch_buffer_bytes" in model["transport"]["models"]
    assert any(st.startswith("losses timeouts") for st in model["statements"])
    assert min(s["jobs"][0]["iteration_time_s"]["all"]) > 0.2
    # A bad value: one line, exit 2.
    spec["flow"]["losses"] = "red"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--out", str(tmp_path / "bad")]) == 2
