"""Servers with NVLink on fabrics whose hosts are GPUs: topologies.builders.add_servers."""
import pytest

from badinput import InputError
from flowsim import EcmpRouter, Net
from topologies import build, from_spec


def test_a_fat_tree_of_servers_has_one_nvlink_switch_per_edge_group():
    fab = from_spec("fat-tree:k=4,gpus_per_server=2")
    assert fab.counts()["nvlink_links"] == 16 and fab.params["gpus_per_server"] == 2
    assert fab.same_server("h0", "h1") and not fab.same_server("h1", "h2")
    assert fab.node("h3")["server"] == 1 and fab.node("h3")["gpu"] == 1
    # NVLink peers talk over NVLink, the others over the fabric: the controller never sees the first.
    net = Net.from_fabric(fab)
    indptr, links = EcmpRouter(0).route(net, [0, 0], [1, 2], [1, 2])
    assert net.node_path(links[indptr[0]:indptr[1]]) == ["h0", "nvl0", "h1"]
    assert "nvl0" not in net.node_path(links[indptr[1]:indptr[2]])


def test_servers_must_fit_under_their_switch():
    for params, key in (({"k": 4, "gpus_per_server": 4}, "gpus_per_server"),  # 2 hosts per edge
                        ({"k": 4, "gpus_per_server": 3}, "gpus_per_server"),  # 16 hosts
                        ({"k": 4, "nvlink_gbps": 100}, "gpus_per_server")):
        with pytest.raises(InputError, match=key):
            build("fat-tree", params)
    fab = build("leaf-spine", {"leaves": 2, "spines": 1, "hosts_per_leaf": 4, "gpus_per_server": 4, "nvlink_gbps": 900})
    assert fab.graph.edges["h0", "nvl0"]["link_gbps"] == 900.0
