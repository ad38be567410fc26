"""The header model (flow.headers): every link carries payload at (MTU - 52) / (MTU + framing) of
its rate, on cases computed by hand and through an experiment file."""
import json

import pytest
import yaml

from dtnet.cli import main
from experiment.model import HEADER_CHOICES
from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from flowsim.network import FRAMING_BYTES, goodput_fraction
from topologies import single_switch
from traffic.trace import Op, Trace


def test_goodput_fractions_by_hand():
    assert goodput_fraction("none", 9000) == 1.0
    assert goodput_fraction("ppp", 9000) == 8948 / 9002      # the packet engine's segment over its PPP frame
    assert goodput_fraction("ethernet", 1500) == 1448 / 1538  # 94.1%: the classic 1500-byte Ethernet figure
    assert goodput_fraction("ppp", 4096) == 4044 / 4098
    assert set(HEADER_CHOICES) == {"none", *FRAMING_BYTES}
    with pytest.raises(ValueError):
        goodput_fraction("ppp", 52)
    with pytest.raises(ValueError):
        goodput_fraction("jumbo", 9000)


def test_one_flow_ends_at_size_over_goodput():
    # 10^8 bytes over one 8 Gb/s (10^9 B/s) path: 0.1 s at the line rate, 0.1 / (8948 / 9002) with headers.
    fab = single_switch(2, link_gbps=8)
    ops = {0: [Op("x", "send", (), size_bytes=10**8, peer=1)], 1: [Op("x", "recv", (), size_bytes=10**8, peer=0)]}
    end = {}
    for frac in (1.0, 8948 / 9002):
        net = Net.from_fabric(fab)
        net.set_goodput(frac)
        res = Simulation(net, [JobSpec("j", fab.hosts, Trace(nranks=2, groups={}, ops=ops))], EcmpRouter(0),
                         Params()).run()
        end[frac] = max(e["end"] for e in res.op_events())
    assert end[1.0] == pytest.approx(0.1, rel=1e-9)
    assert end[8948 / 9002] == pytest.approx(0.1 * 9002 / 8948, rel=1e-9)
    with pytest.raises(ValueError):
        Net.from_fabric(fab).set_goodput(0.0)


def ring_file(tmp_path, flow, transport=None):
    exp = {"name": "ring", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
           "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_reduce", "algorithm": "ring",
                                                                 "size_bytes": 2**26}}], "flow": flow}
    if transport:
        exp["transport"] = transport
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return str(path)


def test_headers_through_a_file_stretch_a_ring_by_the_frame_over_the_segment(tmp_path):
    runs = {"none": {}, "ppp": {"headers": "ppp"}, "eth4k": {"headers": "ethernet"}}
    for name, flow in runs.items():
        tr = {"mtu_bytes": 4096} if name == "eth4k" else None
        assert main(["run", ring_file(tmp_path, flow, tr), "--out", str(tmp_path / name)]) == 0
    s = {k: json.loads((tmp_path / k / "summary.json").read_text()) for k in runs}
    t = {k: s[k]["jobs"][0]["collectives"][0]["cct_s"] for k in runs}
    assert t["ppp"] / t["none"] == pytest.approx(9002 / 8948, rel=1e-6)
    assert t["eth4k"] / t["none"] == pytest.approx((4096 + 38) / (4096 - 52), rel=1e-6)
    assert s["ppp"]["model"]["headers"] == {"headers": "ppp", "mtu_bytes": 9000, "goodput_fraction": 8948 / 9002}
    assert s["none"]["model"]["headers"]["goodput_fraction"] == 1.0
    # With headers the MTU is modelled, not ignored.
    assert "transport.mtu_bytes" not in s["eth4k"]["model"]["ignored"]


@pytest.mark.parametrize("bad", ["tcp", 1, True])
def test_bad_headers_are_one_line_errors(tmp_path, capsys, bad):
    assert main(["check", ring_file(tmp_path, {"headers": bad})]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "flow.headers" in err and "Traceback" not in err


# Store and forward (flow.store_and_forward): each link after the first holds a transfer's last
# packet, min(size, mss) + headers, for one more serialization.
MSS, HDR = 8948, 54  # the packet engine's segment at MTU 9000; IP/TCP/timestamps 52 + PPP 2


def _sim(n, trace, **params):
    fab = single_switch(n, link_gbps=8)  # 10^9 B/s a link; every path: host link, switch, host link
    res = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts[:n], trace)], EcmpRouter(0), Params(**params)).run()
    assert res.complete, res.stalled
    return res


@pytest.mark.parametrize("size", [10**8, 4096])
def test_one_transfer_is_late_by_its_last_packet_at_the_second_link(size):
    ops = {0: [Op("x", "send", (), size_bytes=size, peer=1)], 1: [Op("x", "recv", (), size_bytes=size, peer=0)]}
    res = _sim(2, Trace(nranks=2, groups={}, ops=ops), store_forward=(MSS, HDR))
    end = max(e["end"] for e in res.op_events())
    assert end == pytest.approx(size / 1e9 + (min(size, MSS) + HDR) / 1e9, rel=1e-9)


@pytest.mark.parametrize("model", ["detailed", "bundle"])
def test_a_ring_pays_one_packet_a_step(model):
    from traffic.workload import build_workload
    n, size = 4, 4 * 2**20
    chunk = size // n
    tr = build_workload({"collective": "all_reduce", "algorithm": "ring", "size_bytes": size}, n)
    plain = _sim(n, tr, slice_bytes=chunk, collective_model=model).collectives()[0]["cct_s"]
    sf = _sim(n, tr, slice_bytes=chunk, collective_model=model, store_forward=(MSS, HDR)).collectives()[0]["cct_s"]
    assert plain == pytest.approx(2 * (n - 1) / n * size / 1e9, rel=1e-6)
    frame_s = (MSS + HDR) / 1e9  # the chunk (1 MiB) is larger than a segment: a whole frame a step
    if model == "detailed":
        assert sf - plain == pytest.approx(2 * (n - 1) * frame_s, rel=1e-6)
    # Either model charges it as it charges a delivery latency of the same size.
    lat = _sim(n, tr, slice_bytes=chunk, collective_model=model, latency_s=frame_s).collectives()[0]["cct_s"]
    assert sf == pytest.approx(lat, rel=1e-9)


def test_store_and_forward_through_a_file_is_in_the_summary(tmp_path):
    assert main(["run", ring_file(tmp_path, {"store_and_forward": True, "headers": "ppp"}),
                 "--out", str(tmp_path / "sf")]) == 0
    s = json.loads((tmp_path / "sf" / "summary.json").read_text())
    assert s["model"]["store_and_forward"] is True
    assert any(st.startswith("store and forward") for st in s["model"]["statements"])
    assert main(["check", ring_file(tmp_path, {"store_and_forward": "yes"})]) == 2
