"""Capture without root: the config, the tcpdump plan, its closing counts, and pcap-stats on a hand-made pcap."""
import io
import json
import struct

import pytest

from badinput import InputError
from dtnet import cli
from emulator.testbed import capture
from experiment import model
from experiment.outputs import pcapstats
from topologies import from_spec

EXP = {"name": "c", "topology": {"kind": "fat-tree", "k": 4}, "scale": {"link": 2.5e-5, "bytes": 1e-3},
       "jobs": [{"hosts": "all", "workload": {"pattern": "stride", "stride": 8, "size_bytes": 1 << 30}}]}


def _exp(cap):
    return model.parse({**EXP, "capture": cap}, "c.yaml")


def test_capture_config_fills_defaults_and_round_trips():
    exp = _exp({"links": [["edge0_0", "agg0_0"], ["h0", "edge0_0"]]})
    assert exp.capture == model.Capture((("edge0_0", "agg0_0"), ("h0", "edge0_0")), 2000, 128)
    assert model.parse(model.to_dict(exp), "c.yaml") == exp
    assert "capture" not in model.to_dict(model.parse(EXP, "c.yaml"))


@pytest.mark.parametrize("cap,key", [
    ({"links": [["edge0_0", "core0"]]}, "capture.links[0]"),   # no such link
    ({"links": [["edge0_0"]]}, "capture.links[0]"),
    ({"links": [["edge0_0", "agg0_0"], ["agg0_0", "edge0_0"]]}, "capture.links"),
    ({"links": [], "snaplen": 20}, "capture.snaplen"),
    ({"links": [], "max_packets": 0}, "capture.max_packets"),
    ({"link": []}, "capture.link"),
])
def test_bad_captures_name_the_key(cap, key):
    with pytest.raises(InputError) as e:
        _exp(cap)
    assert str(e.value).startswith(f"c.yaml: {key}:")


def test_plan_captures_the_switch_side_of_each_link():
    fab = from_spec("fat-tree:k=4")
    plans = capture.plan([("h0", "edge0_0"), ("edge0_0", "agg0_1")], fab, lambda n, p: f"xx{n}-eth{fab.port(n, p)}",
                         "/r", max_packets=500, snaplen=96)
    assert [p["interface"] for p in plans] == [f"xxedge0_0-eth{fab.port('edge0_0', 'h0')}",
                                               f"xxedge0_0-eth{fab.port('edge0_0', 'agg0_1')}"]
    assert [p["path"] for p in plans] == ["/r/pcap/h0-edge0_0.pcap", "/r/pcap/edge0_0-agg0_1.pcap"]
    cmd = " ".join(plans[0]["cmd"])
    assert "-c 500" in cmd and "-s 96" in cmd and "-w /r/pcap/h0-edge0_0.pcap" in cmd and "-Z root" in cmd


def test_tcpdump_closing_counts_parse():
    err = ("tcpdump: listening on xxs0-eth1, link-type EN10MB (Ethernet), snapshot length 128 bytes\n"
           "1843 packets captured\n1850 packets received by filter\n7 packets dropped by kernel\n")
    assert capture.parse_stats(err) == {"captured": 1843, "received_by_filter": 1850, "dropped_by_kernel": 7}
    assert capture.parse_stats("1 packet captured\n") == {"captured": 1}


def _pcap(path, records, snaplen=128):
    """A classic pcap: (time_s, packet bytes) records, each cut to snaplen with its full length kept."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        for t, data in records:
            cut = data[:snaplen]
            f.write(struct.pack("<IIII", int(t), round((t - int(t)) * 1e6), len(cut), len(data)))
            f.write(cut)


def test_pcap_stats_counts_flows_by_five_tuple_from_headers_only(tmp_path):
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import ARP, Ether

    def tcp(src, sport, dst, dport, n, seq=0):
        return bytes(Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq) / (b"x" * n))

    # Segments 0, 1, 3, then 1 again (a retransmission), then 2 (late, but new here).
    recs = [(100.0 + 0.1 * i, tcp("10.0.0.1", 40000, "10.0.0.9", 20000, 8000, seq=7 + 8000 * k))
            for i, k in enumerate([0, 1, 3, 1, 2])]
    recs += [(100.05, tcp("10.0.0.9", 20000, "10.0.0.1", 40000, 0)),
             (100.2, bytes(Ether() / IP(src="10.0.0.2", dst="10.0.0.3") / UDP(sport=5, dport=6) / (b"y" * 100))),
             (100.3, bytes(Ether() / ARP()))]
    path = tmp_path / "c.pcap"
    _pcap(path, sorted(recs))
    stats = pcapstats.read_flows(str(path))
    assert stats["packets"] == 8 and stats["other"] == {"packets": 1, "bytes": 42}
    data, udp, ack = stats["flows"]  # by bytes, most first
    assert (data["proto"], data["src"], data["sport"], data["dst"], data["dport"]) == \
        ("tcp", "10.0.0.1", 40000, "10.0.0.9", 20000)
    assert data["packets"] == 5 and data["payload_bytes"] == 5 * 8000  # from headers: the file holds 128 B each
    assert data["bytes"] == 5 * (8000 + 14 + 20 + 20)
    assert data["rate_mbps"] == pytest.approx(data["bytes"] * 8 / 0.4 / 1e6)
    assert (ack["sport"], ack["payload_bytes"], ack["rate_mbps"]) == (20000, 0, None)
    assert data["retrans_bytes"] == 8000
    assert (udp["proto"], udp["payload_bytes"]) == ("udp", 100)
    out = io.StringIO()
    pcapstats.print_stats(stats, out)
    text = out.getvalue()
    assert "10.0.0.1:40000" in text and "10.0.0.9:20000" in text and "3 flows" in text and "not IP: 1" in text


def test_pcap_stats_cli_json_and_bad_files(tmp_path, capsys):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    path = tmp_path / "c.pcap"
    _pcap(path, [(1.0, bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=20000)))])
    assert cli.main(["pcap-stats", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["flows"][0]["dport"] == 20000 and data["packets"] == 1
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    for bad in (junk, tmp_path / "missing.pcap"):
        assert cli.main(["pcap-stats", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err


def test_retransmitted_bytes_count_ranges_seen_before_not_gaps_filled_late():
    seq = pcapstats.TcpSeq(first_seq=(1 << 32) - 100)  # wraps around
    assert seq.seen_again((1 << 32) - 100, 1000) == 0
    assert seq.seen_again(1900, 1000) == 0        # a gap: [900, 2000) was lost before the capture point
    assert seq.seen_again(900, 1000) == 0         # its retransmission is new here
    assert seq.seen_again(400, 1000) == 1000      # a real retransmission
    assert seq.seen_again(2800, 200) == 100       # half old, half new
    assert seq.seen_again((1 << 32) - 300, 100) == 0  # sent before the capture began
