"""The window model (flow.window_bytes): a connection's rate is at most window / RTT, on cases
computed by hand, on both collective models, and through an experiment file."""
import json

import pytest
import yaml

from dtnet.cli import main
from experiment.model import WINDOW_CHOICES
from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from flowsim.engine import WINDOW_CHOICES as WINDOW_BYTES, window_bytes_of
from topologies import single_switch
from traffic.trace import Op, Trace
from traffic.workload import build_workload

RATE = 1e9  # bytes/s: 8 Gb/s links


def one_send(size):
    ops = {0: [Op("x", "send", (), size_bytes=size, peer=1)], 1: [Op("x", "recv", (), size_bytes=size, peer=0)]}
    return Trace(nranks=2, groups={}, ops=ops)


def sim_run(n, trace, **params):
    fab = single_switch(n, link_gbps=8)
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts[:n], trace)], EcmpRouter(0), Params(**params)).run()
    assert res.complete, res.stalled
    return res


def send_end(res):
    return max(e["end"] for e in res.op_events())


@pytest.mark.parametrize("window,lat", [(50_000, 50e-6), (200_000, 50e-6), (30_000, 10e-6), (10**6, 0.0)])
def test_one_flow_runs_at_the_lesser_of_link_and_window_over_rtt(window, lat):
    size = 10**8
    rate = min(RATE, window / (2 * lat)) if lat > 0 else RATE
    res = sim_run(2, one_send(size), latency_s=lat, window_bytes=window)
    assert send_end(res) == pytest.approx(size / rate + lat, rel=1e-6)


def test_rtt_counts_each_fabric_hop_both_ways():
    # Two host links of 20 us each: one-way 40 us, RTT 80 us; 40 kB in flight gives 0.5 GB/s.
    res = sim_run(2, one_send(10**8), hop_latency_s=20e-6, window_bytes=40_000)
    assert send_end(res) == pytest.approx(10**8 / 0.5e9 + 40e-6, rel=1e-6)


@pytest.mark.parametrize("model", ["detailed", "bundle"])
def test_a_ring_slows_as_latency_grows_past_window_over_rate(model):
    n, size, window = 8, 8 * 2**20, 2**18
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": size}, n)
    cct = {}
    for lat in (1e-6, 100e-6, 400e-6):
        res = sim_run(n, tr, latency_s=lat, window_bytes=window, collective_model=model, slice_bytes=2**15)
        cct[lat] = res.collectives()[0]["cct_s"]
    steps, bw_bytes = 2 * (n - 1), 2 * (n - 1) / n * size
    # 256 KiB over a 2 us or 200 us RTT is above the link's 1 GB/s: the bandwidth time plus latencies.
    for lat in (1e-6, 100e-6):
        assert bw_bytes / RATE <= cct[lat] <= bw_bytes / RATE + steps * lat
    # Over 800 us it is 0.33 GB/s: every connection runs at window / RTT.
    w_rate = window / 800e-6
    assert bw_bytes / w_rate <= cct[400e-6] <= bw_bytes / w_rate + steps * 400e-6
    assert cct[400e-6] > 2.5 * cct[100e-6]


def test_no_window_and_a_huge_one_give_the_same_answer():
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": 2**24}, 4)
    a = sim_run(4, tr, latency_s=50e-6).collectives()[0]["cct_s"]
    b = sim_run(4, tr, latency_s=50e-6, window_bytes=2**40).collectives()[0]["cct_s"]
    assert a == b


def test_named_windows_are_the_same_in_the_file_and_the_engine():
    assert set(WINDOW_CHOICES) == set(WINDOW_BYTES)
    assert window_bytes_of("nccl") == 4 * 2**20 and window_bytes_of(1000) == 1000.0 and window_bytes_of(None) is None
    with pytest.raises(ValueError):
        Params(window_bytes=0)


def ring_file(tmp_path, flow):
    exp = {"name": "ring", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
           "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_reduce", "algorithm": "ring",
                                                                 "size_bytes": 2**26}}], "flow": flow}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return str(path)


def test_window_through_an_experiment_file_is_in_the_summary(tmp_path):
    flow = {"window_bytes": "nccl", "latency_us": 200, "collective_model": "detailed"}
    assert main(["run", ring_file(tmp_path, flow), "--out", str(tmp_path / "w")]) == 0
    assert main(["run", ring_file(tmp_path, {"latency_us": 200, "collective_model": "detailed"}),
                 "--out", str(tmp_path / "n")]) == 0
    s = {k: json.loads((tmp_path / k / "summary.json").read_text()) for k in ("w", "n")}
    assert s["w"]["model"]["window_bytes"] == 4 * 2**20 and s["n"]["model"]["window_bytes"] is None
    # 4 MiB over a 400 us RTT is 10.5 GB/s, a fifth of 400 Gb/s: the windowed ring is slower.
    t = {k: s[k]["aggregate"]["iteration_time_s_mean"] for k in s}
    assert t["w"] > 3 * t["n"]


@pytest.mark.parametrize("bad", [0, -5, "tcp", 1.5, True])
def test_bad_windows_are_one_line_errors(tmp_path, capsys, bad):
    assert main(["check", ring_file(tmp_path, {"window_bytes": bad})]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "flow.window_bytes" in err and "Traceback" not in err
