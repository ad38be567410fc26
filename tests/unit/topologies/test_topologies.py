"""Fabric builders: counts from the closed-form formulas, stable numbering, spec parsing."""
import networkx as nx
import pytest

from badinput import InputError
from topologies import Fabric, build, fat_tree, from_spec, leaf_spine, parse_spec, rail_optimized, single_switch


@pytest.mark.parametrize("k", [2, 4, 6, 8, 12])
def test_fat_tree_counts_match_formulas(k):
    c = fat_tree(k).counts()
    assert c["hosts"] == k ** 3 // 4
    assert c["switches"] == 5 * k * k // 4
    assert c["links"] == 3 * k ** 3 // 4


@pytest.mark.parametrize("servers,gpus,spines", [(1, 1, 0), (4, 8, 4), (2, 4, 1), (3, 2, 5)])
def test_rail_optimized_counts(servers, gpus, spines):
    f = rail_optimized(servers, gpus, spines)
    c = f.counts()
    assert c["hosts"] == servers * gpus
    assert c["switches"] == gpus + spines + servers
    assert c["links"] == 2 * servers * gpus + gpus * spines
    # GPU g of every server sits on rail g.
    for h in f.hosts:
        sw, _ = f.attachment(h)
        assert sw == f"rail{f.node(h)['gpu']}"


def test_rail_optimized_nvlink_domain_is_not_openflow():
    f = rail_optimized(2, 4, 2)
    assert all(not f.node(f"nvl{s}")["openflow"] for s in range(2))
    assert f.same_server("h0", "h3") and not f.same_server("h0", "h4")
    # The steered part has no path through an NVLink switch.
    assert "nvl0" not in f.switch_graph()


def test_leaf_spine_and_single_switch_counts():
    c = leaf_spine(4, 2, 4).counts()
    assert (c["hosts"], c["switches"], c["links"]) == (16, 6, 24)
    c = single_switch(8).counts()
    assert (c["hosts"], c["switches"], c["links"]) == (8, 1, 8)


@pytest.mark.parametrize("spec", ["single-switch:hosts=5", "fat-tree:k=4", "leaf-spine:leaves=3,spines=2,hosts_per_leaf=2",
                                  "rail-optimized:servers=2,gpus_per_server=4,spines=2"])
def test_ports_unique_and_addresses_distinct(spec):
    f = from_spec(spec)
    for n in f.graph.nodes:
        ports = [f.port(n, nbr) for nbr in f.graph.neighbors(n)]
        assert len(ports) == len(set(ports)), n
    ips = [f.node(h)["ip"] for h in f.hosts]
    macs = [f.node(h)["mac"] for h in f.hosts]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
    dpids = [f.node(s)["dpid"] for s in f.switches]
    assert len(set(dpids)) == len(dpids)
    assert nx.is_connected(f.graph)


def test_round_trip_through_dict_keeps_everything():
    f = rail_optimized(2, 2, 1)
    g = Fabric.from_dict(f.to_dict())
    assert g.to_dict() == f.to_dict()
    assert g.attachment("h3") == f.attachment("h3")


def test_oversubscription_divides_uplinks():
    f = fat_tree(4, link_gbps=100, oversubscription=4)
    rates = {d["kind"]: d["link_gbps"] for _, _, d in f.links()}
    assert rates == {"host": 100, "fabric": 25}


def test_parse_spec_types():
    assert parse_spec("fat-tree:k=4,link_gbps=12.5") == ("fat-tree", {"k": 4, "link_gbps": 12.5})


@pytest.mark.parametrize("spec,key", [
    ("fat-tree:k=3", "topology.k"),
    ("fat-tree:k=4,bogus=1", "spec.bogus"),
    ("mesh:n=3", "spec.kind"),
    ("leaf-spine:leaves=2", "spec.hosts_per_leaf"),
    ("single-switch:hosts=0", "topology.hosts"),
    ("fat-tree:k=four", "k"),
    ("rail-optimized:servers=2,gpus_per_server=2,spines=0", "topology.spines"),
])
def test_bad_specs_give_one_line_errors(spec, key):
    with pytest.raises(InputError) as ei:
        from_spec(spec)
    msg = str(ei.value)
    assert "\n" not in msg and key in msg and "expected" in msg


def test_build_reports_the_file():
    with pytest.raises(InputError) as ei:
        build("fat-tree", {"k": 5}, file="x.yaml")
    assert str(ei.value).startswith("x.yaml: topology.k: expected an even integer")
