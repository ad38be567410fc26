"""Cluster-scale fabrics: published designs, per-tier rates, limits, fabric files."""
import json
import os

import networkx as nx
import pytest

from badinput import InputError
from topologies import (MAX_HOSTS, Fabric, fat_tree, from_spec, hpn, leaf_spine, load_fabric_file,
                        rail_optimized, single_switch, superpod)
from topologies.show import show

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir))
EXAMPLE = os.path.join(REPO, "experiments", "fabrics", "dual-tor-4gpu.yaml")


def _layer_counts(fab):
    return {layer: len(names) for layer, names in fab.layers().items()}


def _cables(fab, a_layer, b_layer):
    n = 0
    for a, b, d in fab.graph.edges(data=True):
        la, lb = fab.node(a)["layer"], fab.node(b)["layer"]
        if {la, lb} == {a_layer, b_layer}:
            n += d.get("cables", 1)
    return n


# DGX SuperPOD RA, "Larger DGX SuperPOD component counts" (H100: RA-11333-001 Table 3; the
# B200 edition has the same 32-node SU and table: docs.nvidia.com/dgx-superpod/
# reference-architecture-scalable-infrastructure-b200/latest/dgx-superpod-architecture.html):
# SUs -> (nodes, GPUs, leaf, spine, core, node-leaf cables, leaf-spine cables, spine-core cables)
SUPERPOD_TABLE = {
    2: (64, 512, 16, 8, 0, 512, 512, 0),
    4: (128, 1024, 32, 16, 0, 1024, 1024, 0),
    8: (256, 2048, 64, 32, 0, 2048, 2048, 0),
    16: (512, 4096, 128, 128, 64, 4096, 4096, 4096),
    32: (1024, 8192, 256, 256, 128, 8192, 8192, 8192),
    64: (2048, 16384, 512, 512, 256, 16384, 16384, 16384),
}


@pytest.mark.parametrize("sus", sorted(SUPERPOD_TABLE))
def test_superpod_counts_match_the_reference_architecture(sus):
    nodes, gpus, leaf, spine, core, node_leaf, leaf_spine_c, spine_core = SUPERPOD_TABLE[sus]
    f = superpod(sus)
    layers = _layer_counts(f)
    assert f.counts()["hosts"] == gpus
    assert layers["nvlink"] == nodes  # one NVLink domain per DGX node
    assert (layers["leaf"], layers["spine"], layers.get("core", 0)) == (leaf, spine, core)
    assert _cables(f, "host", "leaf") == node_leaf
    assert _cables(f, "leaf", "spine") == leaf_spine_c
    assert _cables(f, "spine", "core") == spine_core
    # QM9700 leaves and spines have 64 ports: 32 down, 32 up (cores: 64 down).
    for s in f.switches:
        nd = f.node(s)
        if nd["layer"] in ("leaf", "spine", "core"):
            ports = sum(f.graph.edges[s, n].get("cables", 1) for n in f.graph.neighbors(s))
            assert ports == 64, (s, ports)
    # Rail-optimized: GPU g of every node on its SU's rail leaf g.
    for h in f.hosts[:64]:
        nd = f.node(h)
        assert f.attachment(h)[0] == f"leaf{nd['su']}_{nd['gpu']}"


def test_superpod_refuses_an_su_count_it_cannot_wire():
    with pytest.raises(InputError, match="topology.sus: expected a scalable-unit count"):
        superpod(3)


def test_hpn_pod_counts_match_the_published_design():
    # SIGCOMM'24 HPN: 15 segments of 1,024 GPUs per pod; 8 rails; dual-ToR, dual-plane.
    # ToR and aggregation counts: SimAI's AlibabaHPN dual-plane defaults (240 ASW, 120 PSW,
    # 128 NIC ports per ASW, 400 Gb/s ASW-PSW), aliyun/SimAI gen_Topo_Template.py.
    f = hpn()
    c, layers = f.counts(), _layer_counts(f)
    assert c["hosts"] == 15 * 1024 == 15360
    assert layers == {"agg": 120, "tor": 240, "nvlink": 1920}
    assert c["host_links"] == 2 * 15360 and c["fabric_links"] == 240 * 60
    for s in f.switches:
        nd = f.node(s)
        deg = f.graph.degree(s)
        if nd["layer"] == "tor":
            assert deg == 128 + 60  # 128 NIC ports of 200 Gb/s down, 60 x 400 Gb/s up
        elif nd["layer"] == "agg":
            assert deg == 120
    # Dual-ToR: the two ports of a NIC reach two ToRs of one rail, in the two planes.
    for h in f.hosts[:16]:
        (t0, _), (t1, _) = f.attachments(h)
        n0, n1 = f.node(t0), f.node(t1)
        assert (n0["plane"], n1["plane"]) == (0, 1) and n0["rail"] == n1["rail"] == f.node(h)["gpu"]
    # Dual-plane: a ToR reaches only the aggregation switches of its own plane.
    for nbr in f.graph.neighbors("tor0_0_1"):
        if f.node(nbr)["layer"] == "agg":
            assert f.node(nbr)["plane"] == 1
    # Tier-1 oversubscription 128 x 200 / (60 x 400) = 1.067 (HPN: 15:16 spare uplinks).
    assert 128 * f.params["host_link_gbps"] / (60 * f.params["spine_link_gbps"]) == pytest.approx(1.0667, abs=1e-3)


def test_hpn_refuses_more_than_a_pod():
    with pytest.raises(InputError, match="topology.segments: expected at most 15"):
        hpn(segments=16)


def test_three_tier_fat_trees_reach_100k_hosts():
    # Al-Fares et al., SIGCOMM'08, section 3: 48-port switches give a fat-tree of 27,648 hosts.
    assert fat_tree(48).counts()["hosts"] == 27648
    f = fat_tree(74)
    c = f.counts()
    assert c["hosts"] == 74 ** 3 // 4 == 101306 and c["switches"] == 5 * 74 * 74 // 4
    assert _layer_counts(f) == {"core": 37 * 37, "agg": 74 * 37, "edge": 74 * 37}


def test_addresses_stay_distinct_past_one_subnet():
    f = single_switch(70000)
    ips = [f.node(h)["ip"] for h in f.hosts]
    assert len(set(ips)) == len(ips)
    assert ips[0] == "10.0.0.1" and ips[65533] == "10.0.255.254"  # unchanged below 65,535 hosts
    assert ips[65534] == "10.2.0.1"  # next block; NVLink keeps the odd second octets
    assert all(ip.split(".")[1] in ("0", "2") for ip in ips)


@pytest.mark.parametrize("spec,key", [
    ("single-switch:hosts=100000000", "topology.hosts"),
    ("fat-tree:k=2000", "topology.k"),
    ("leaf-spine:leaves=2000,spines=1000,hosts_per_leaf=1", "topology.spines"),
    ("rail-optimized:servers=100000,gpus_per_server=8,spines=2", "topology.servers"),
    ("hpn:segments=15,aggs_per_plane=100000", "topology.aggs_per_plane"),
])
def test_sizes_beyond_the_limits_are_refused_before_building(spec, key, monkeypatch):
    built = []
    monkeypatch.setattr(Fabric, "add_host", lambda *a, **k: built.append(a))
    with pytest.raises(InputError) as ei:
        from_spec(spec)
    msg = str(ei.value)
    assert msg.startswith(key) and "at most" in msg and "docs/fabrics.md" in msg
    assert not built


def test_limit_is_the_documented_number():
    doc = open(os.path.join(REPO, "docs", "fabrics.md")).read()
    assert f"{MAX_HOSTS:,}" in doc


def test_per_tier_rates_and_oversubscription():
    f = leaf_spine(4, 2, 8, host_link_gbps=100, oversubscription=2)
    rates = {d["kind"]: d["link_gbps"] for _, _, d in f.links()}
    assert rates == {"host": 100, "fabric": 8 * 100 / (2 * 2)}
    assert f.params["oversubscription"] == 2
    r = rail_optimized(16, 8, 4, host_link_gbps=400, spine_link_gbps=800)
    assert r.params["oversubscription"] == pytest.approx(16 * 400 / (4 * 800))
    assert {d["kind"]: d["link_gbps"] for _, _, d in r.links() if d["kind"] != "nvlink"} == {"host": 400, "fabric": 800}
    # The resolved params rebuild the same fabric (the experiment model writes them back).
    again = from_spec("leaf-spine:" + ",".join(f"{k}={v}" for k, v in f.params.items()))
    assert again.to_dict()["links"] == f.to_dict()["links"]
    with pytest.raises(InputError, match="spine_link_gbps: expected 200 Gb/s to match oversubscription 2"):
        leaf_spine(4, 2, 8, host_link_gbps=100, oversubscription=2, spine_link_gbps=300)
    with pytest.raises(InputError, match="oversubscription: expected a number > 0"):
        fat_tree(4, oversubscription=0)


def test_counts_are_kept_while_building_and_survive_a_round_trip():
    f = superpod(2)
    g = Fabric.from_dict(json.loads(json.dumps(f.to_dict())))
    assert g.counts() == f.counts() and g.hosts == f.hosts and g.switches == f.switches
    assert f.counts()["cables"] > f.counts()["links"]  # leaf-spine pairs carry 4 cables each


def test_the_example_fabric_file_loads():
    f = load_fabric_file(EXAMPLE)
    c = f.counts()
    assert (c["hosts"], c["switches"], c["host_links"], c["nvlink_links"], c["fabric_links"]) == (4, 8, 8, 4, 4)
    assert [f.port(h, s) for h, s in (("h0", "tor0a"), ("h0", "tor0b"), ("h0", "nvl0"))] == [0, 1, 2]
    assert f.attachment("h2") == ("tor0a", f.port("tor0a", "h2"))
    assert f.same_server("h0", "h1") and not f.same_server("h1", "h2")
    assert f.link_gbps == 200 and f.host_link_gbps("h3") == 200
    assert "nvl0" not in f.switch_graph()
    assert "dual-homed: 4 hosts" in show(EXAMPLE)


GRAPHML = """<?xml version='1.0' encoding='utf-8'?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="d0" for="graph" attr.name="link_gbps" attr.type="double"/>
  <key id="d1" for="node" attr.name="role" attr.type="string"/>
  <key id="d2" for="node" attr.name="layer" attr.type="string"/>
  <key id="d3" for="edge" attr.name="link_gbps" attr.type="double"/>
  <graph edgedefault="undirected">
    <data key="d0">100.0</data>
    <node id="s0"><data key="d1">switch</data><data key="d2">tor</data></node>
    <node id="h0"><data key="d1">host</data></node>
    <node id="h1"><data key="d1">host</data></node>
    <node id="h2"><data key="d1">host</data></node>
    <edge source="h0" target="s0"/>
    <edge source="h1" target="s0"/>
    <edge source="h2" target="s0"><data key="d3">25.0</data></edge>
  </graph>
</graphml>
"""


def test_graphml_as_networkx_writes_it(tmp_path):
    # The layout networkx.write_graphml produces (typed keys, graph data, undirected edges).
    path = tmp_path / "f.graphml"
    path.write_text(GRAPHML)
    f = load_fabric_file(str(path))
    assert f.counts()["hosts"] == 3 and f.host_link_gbps("h2") == 25 and f.host_link_gbps("h0") == 100
    assert f.node("s0")["layer"] == "tor"
    bad = tmp_path / "bad.graphml"
    bad.write_text(GRAPHML.replace('target="s0"/>', 'target="s9"/>', 1))
    with pytest.raises(InputError, match=r"links\[0\].b: expected a node named in nodes, found s9"):
        load_fabric_file(str(bad))


def test_a_fabric_file_feeds_the_controller_routes():
    from controller.routing import NextHops
    f = load_fabric_file(EXAMPLE)
    nh = NextHops(f)
    # h0 -> h1 (both plane 0 on eth0): tor0a -> agg0 -> tor1a.
    assert nh.ports("tor0a", "tor1a") == (f.port("tor0a", "agg0"),)


def test_mininet_adapter_takes_the_new_fabrics():
    pytest.importorskip("mininet")
    from emulator.testbed.mntopo import FabricTopo
    for fab in (hpn(segments=1, hosts_per_segment=2, gpus_per_host=2, aggs_per_plane=2), superpod(1),
                load_fabric_file(EXAMPLE)):
        topo = FabricTopo(fabric=fab)
        assert len(topo.hosts()) == fab.counts()["hosts"]
        assert len(topo.links()) == fab.counts()["links"]


def test_an_experiment_names_a_fabric_file(tmp_path):
    from experiment import model
    exp = model.load(os.path.join(REPO, "experiments", "fabric-file-dual-tor.yaml"))
    assert exp.topology == {"file": EXAMPLE}
    assert exp.fabric().counts() == load_fabric_file(EXAMPLE).counts()
    assert model.parse(model.to_dict(exp), file=exp.source) == exp
    moved = tmp_path / "e.yaml"  # a relative path is relative to the experiment file
    text = open(os.path.join(REPO, "experiments", "fabric-file-dual-tor.yaml")).read()
    moved.write_text(text.replace("file: fabrics/dual-tor-4gpu.yaml", f"file: {EXAMPLE}"))
    assert model.load(str(moved)).topology == {"file": EXAMPLE}


def test_per_host_answers_follow_a_link_added_after_they_were_asked():
    # The fabric remembers each host's attachments, NIC rate and NVLink switch; a link added
    # later must show in them (a builder may query while it wires).
    fab = Fabric("custom", {}, 100)
    fab.add_host("h0")
    fab.add_switch("s0", "leaf")
    fab.add_switch("s1", "leaf")
    fab.add_switch("nv0", "nvlink", openflow=False)
    assert fab.attachments("h0") == [] and fab.nvlink_switch("h0") is None
    fab.add_link("h0", "s0", 100, "host")
    assert fab.attachments("h0") == [("s0", 1)] and fab.host_link_gbps("h0") == 100
    fab.add_link("h0", "s1", 200, "host")
    assert fab.attachments("h0") == [("s0", 1), ("s1", 1)] and fab.host_link_gbps("h0") == 100
    fab.add_link("h0", "nv0", 900, "nvlink")
    assert fab.nvlink_switch("h0") == "nv0"
    fab.attachments("h0").append(("x", 9))  # a caller's list is its own
    assert fab.attachments("h0") == [("s0", 1), ("s1", 1)]
