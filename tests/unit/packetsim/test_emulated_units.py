"""`packet: {units: emulated}`: the packet engine's experiment derived in the emulator's units
(packetsim.emulated), checked as pure functions: no ns-3 needed."""
from __future__ import annotations

import os

import numpy as np
import pytest

from badinput import InputError
from experiment import model
from packetsim import emulated, runner, scenario

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RING = os.path.join(ROOT, "experiments", "ring-single-switch.yaml")  # scale link 2.5e-5, bytes 1e-3: 40x
BASE = ["sweep={}", "engine=packet", "packet.units=emulated", "transport.tcp.cc=cubic", "topology.hosts=4",
        "jobs.0.workload.size_bytes=268435456", "jobs.0.workload.compute_ms=5", "controller.routing=shortest"]


def load(*sets):
    return model.load(RING, [*BASE, *sets])


def test_transport_is_the_emulators_defaults_with_the_measured_hop():
    t = emulated.transport(load())
    assert (t.cc, t.mtu_bytes) == ("cubic", 9000)
    assert t.switch_buffer_bytes == 1000 * 1500  # testbed.queue_packets of 1500 B
    assert t.latency_us == {"host": emulated.HOP_LATENCY_US, "fabric": emulated.HOP_LATENCY_US, "nvlink": 0.0}
    assert t.ecn is None and not t.spray
    assert t.ack_priority and t.delack_s == 0.04  # the emulator's ACK class; Linux's delayed-ACK floor
    assert t.htb_burst_s == 0.001                  # the emulator's HTB burst: 1 ms of traffic, 2 frames at least
    # Linux's TSQ on the emulator's 10 Mb/s NICs: 1 ms is 1,220 B, so two segments (emulated bytes)
    assert t.tsq and t.tsq_bytes(400 * 2.5e-5) == 2 * (9000 - 52)


def test_transport_scales_buffers_and_stretches_latency():
    t = emulated.transport(load("transport.switch_buffer_bytes=8000000000", "transport.latency_us.fabric=2",
                                "packet.hop_latency_us=50", "testbed.datapath=afxdp"))
    assert t.switch_buffer_bytes == 8_000_000  # x scale.bytes, as the emulator's bfifo
    assert t.mtu_bytes == 3000                  # AF_XDP's ceiling
    assert t.latency_us["fabric"] == pytest.approx(2 * 40 + 50)  # real x dilation, plus the hop
    assert t.latency_us["host"] == pytest.approx(50)


@pytest.mark.parametrize("sets, key", [(["transport.tcp.cc=null"], "transport.tcp.cc"),
                                       (["transport.tcp.cc=dctcp", "transport.ecn.min_bytes=60000",
                                         "transport.ecn.max_bytes=60000"], "transport.ecn")])
def test_refused_without_an_emulator_counterpart(sets, key):
    with pytest.raises(InputError) as e:
        runner.check(load(*sets))
    assert e.value.key == key


def test_the_scenario_is_scaled_as_the_emulator_scales_it():
    real = model.load(RING, [s for s in BASE if not s.startswith("packet.")])
    emu = load()
    _, _, net_r, sc_r, _, _ = runner.plan(real)
    _, _, net_e, sc_e, _, _ = runner.plan(emu)
    x = [i for i, k in enumerate(sc_r.kinds) if k == scenario.TRANSFER]
    c = [i for i, k in enumerate(sc_r.kinds) if k == scenario.COMPUTE and sc_r.durations[i] > 0]
    assert x and c
    assert np.allclose([sc_e.sizes[i] for i in x], [sc_r.sizes[i] * 1e-3 for i in x], atol=0.5)
    assert np.allclose([sc_e.durations[i] for i in c], [sc_r.durations[i] * 40 for i in c])
    assert sc_e.slice_bytes == emu.testbed.slice_bytes  # the agents' slice, in emulated bytes
    # The controller's net stays real; the driver's copy runs at the emulated rates.
    assert np.array_equal(net_e.link_gbps, net_r.link_gbps)
    assert np.allclose(emulated.scaled_net(net_e, emu.scale).link_gbps, net_r.link_gbps * 2.5e-5)


def test_results_come_back_in_real_units():
    res = {"meta": {"t0": 0.0, "sim_end": 4.0, "bin_s": 0.04},
           "tasks": [{"ready": 0.0, "start": 0.4, "end": 0.8}, {"ready": -1, "start": -1, "end": -1}],
           "conns": [{"bytes": 1000, "retx": 2, "retx_bytes": 9000}],
           "queues": [{"mean": 100.0, "p99": 200.0, "max": 300, "bins": [10, 20], "qbins": [5.0]}]}
    built = {"links": [(0, 1, "host", 0.01)]}
    emulated.to_real(res, built, model.Scale(link=2.5e-5, bytes=1e-3))
    assert res["tasks"][0]["end"] == pytest.approx(0.02) and res["tasks"][1]["end"] == -1
    assert res["meta"]["sim_end"] == pytest.approx(0.1) and res["meta"]["bin_s"] == pytest.approx(0.001)
    assert res["conns"][0]["bytes"] == pytest.approx(1e6) and res["conns"][0]["retx"] == 2
    assert res["queues"][0]["bins"] == pytest.approx([1e4, 2e4]) and res["queues"][0]["max"] == pytest.approx(3e5)
    assert built["links"][0][3] == pytest.approx(400.0)


def test_the_option_round_trips_and_is_checked():
    exp = load("packet.hop_latency_us=80")
    assert model.parse(model.to_dict(exp)).packet == exp.packet
    with pytest.raises(InputError) as e:
        load("packet.units=wall")
    assert e.value.key == "packet.units"
