"""Capture on a real fabric: the two uplinks of one edge switch under ECMP carry exactly the
stride flows that leave or enter that edge, each flow whole, on one uplink only."""
import json
import math

import pytest

from emulator.agent.replay import HEADER, WARMUP_BYTES
from tests.integration.helpers import assert_nothing_left, dtnet

pytestmark = pytest.mark.mininet

SIZE = 1_000_000_000
SCALE_BYTES = 1.0e-3
EXPERIMENT = """\
name: capture-stride
topology: {{kind: fat-tree, k: 4, link_gbps: 400}}
scale: {{link: 1.25e-5, bytes: {scale_bytes}}}
controller: {{routing: ecmp}}
testbed: {{switch_daemons: {switchd}}}
jobs:
  - name: stride
    hosts: all
    workload: {{pattern: stride, stride: 8, size_bytes: {size}, iterations: 1}}
capture: {{links: [[edge0_0, agg0_0], [edge0_0, agg0_1]], max_packets: 200000}}
"""


def ip(h):
    return f"10.0.0.{h + 1}"


# The machine's switch daemon, and two of the run's own (the edge's ports in a daemon's namespace).
@pytest.mark.parametrize("switchd", ["shared", 2])
def test_pcap_stats_sees_the_stride_flows_of_one_edge_on_its_uplinks(tmp_path, switchd):
    exp, out = tmp_path / "e.yaml", tmp_path / "r"
    exp.write_text(EXPERIMENT.format(scale_bytes=SCALE_BYTES, size=SIZE, switchd=switchd))
    r = dtnet("run", str(exp), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "complete", summary["error"]
    caps = {c["link"]: c for c in summary["capture"]}
    assert set(caps) == {"edge0_0-agg0_0", "edge0_0-agg0_1"}
    assert all(not c["limit_reached"] and c["dropped_by_kernel"] == 0 for c in caps.values()), caps

    seen = {}
    for link, c in caps.items():
        r = dtnet("pcap-stats", str(out / c["file"]), "--json")
        assert r.returncode == 0, r.stderr
        seen[link] = json.loads(r.stdout)
        assert seen[link]["packets"] == c["packets"]
    # h0, h1 sit under edge0_0; stride 8 sends h0 -> h8, h1 -> h9 and brings h8 -> h0, h9 -> h1.
    expected = {(ip(0), ip(8)), (ip(1), ip(9)), (ip(8), ip(0)), (ip(9), ip(1))}
    data = {}  # (src, dst) -> [(link, flow)]
    for link, st in seen.items():
        for f in st["flows"]:
            if ":" in f["src"]:  # IPv6: the root namespace's own link-local chatter (RS, MLD) on the port
                assert f["src"].startswith("fe80:") and f["dst"].startswith("ff02:"), f
                continue
            assert f["proto"] == "tcp" and 20000 in (f["sport"], f["dport"]), f  # agents' port, job 0
            pair = (f["src"], f["dst"]) if f["dport"] == 20000 else (f["dst"], f["src"])
            assert pair in expected, f  # nothing but this edge's flows, data or ACKs
            if f["dport"] == 20000:
                data.setdefault(pair, []).append((link, f))
    assert set(data) == expected
    emulated = round(SIZE * SCALE_BYTES)
    framed = emulated + HEADER.size * math.ceil(emulated / 16384)  # each 16 KiB slice has a header
    for pair, where in data.items():
        assert len(where) == 1, f"{pair} seen on {[w[0] for w in where]}: ECMP splits flows, not packets"
        f = where[0][1]
        # Every byte of the transfer crossed this uplink once (retransmissions aside), maybe
        # with the tail of the connection's warm-up.
        unique = f["payload_bytes"] - f["retrans_bytes"]
        assert framed <= unique <= framed + WARMUP_BYTES + HEADER.size, (pair, f)
    spread = {link: sum(1 for w in data.values() if w[0][0] == link) for link in caps}
    print(f"data flows per uplink: {spread}")
    assert_nothing_left(out)
