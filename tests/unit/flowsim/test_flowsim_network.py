"""The fabric as arrays and the vectorized routers."""
import numpy as np
import pytest

from flowsim import EcmpRouter, Net, ShortestRouter
from topologies import fat_tree, leaf_spine, rail_optimized


def cables(net):
    return {frozenset(net.link_name(i)) for i in range(net.n_links)}


@pytest.mark.parametrize("k", [2, 4, 6])
def test_array_fat_tree_is_the_builders_fat_tree(k):
    fab = fat_tree(k, link_gbps=100, oversubscription=2)
    a, b = Net.from_fabric(fab), Net.fat_tree(k, link_gbps=100, oversubscription=2)
    assert sorted(a.names) == sorted(b.names) and cables(a) == cables(b)
    gb = {frozenset(a.link_name(i)): a.link_gbps[i] for i in range(a.n_links)}
    assert all(gb[frozenset(b.link_name(i))] == b.link_gbps[i] for i in range(b.n_links))
    assert [a.names[h] for h in a.hosts] == [b.names[h] for h in b.hosts]
    assert (a.host_ip == b.host_ip).all()


def test_every_route_is_a_shortest_path_over_up_links():
    fab = fat_tree(4)
    net = Net.from_fabric(fab)
    src, dst = np.repeat(np.arange(16), 16), np.tile(np.arange(16), 16)
    for router in (EcmpRouter(3), ShortestRouter()):
        indptr, links = router.route(net, src, dst, np.arange(256, dtype=np.uint64))
        for i, (s, d) in enumerate(zip(src, dst)):
            p = links[indptr[i]:indptr[i + 1]]
            if s == d:
                assert len(p) == 0
                continue
            nodes = net.node_path(p)
            assert nodes[0] == f"h{s}" and nodes[-1] == f"h{d}"
            same_edge, same_pod = s // 2 == d // 2, s // 4 == d // 4
            assert len(p) == (2 if same_edge else 4 if same_pod else 6)
            assert all(net.link_src[b] == net.link_dst[a] for a, b in zip(p, p[1:]))


def test_routes_avoid_a_down_cable_and_a_cut_off_host_gets_no_path():
    fab = fat_tree(4)
    net = Net.from_fabric(fab)
    router = EcmpRouter(0)
    assert len(router.equal_cost_paths(net, 0, 15)) == 4
    net.set_cable("edge0_0", "agg0_0", up=False)
    paths = router.equal_cost_paths(net, 0, 15)
    assert len(paths) == 2 and all("agg0_0" not in net.node_path(p) for p in paths)
    indptr, links = router.route(net, np.zeros(64, np.int64), np.full(64, 15), np.arange(64, dtype=np.uint64))
    assert all("agg0_0" not in net.node_path(links[indptr[i]:indptr[i + 1]]) for i in range(64))
    net.set_cable("h0", "edge0_0", up=False)
    indptr, links = router.route(net, [0], [15], [1])
    assert indptr[-1] == 0


def test_same_server_peers_use_nvlink_and_the_others_the_rails():
    fab = rail_optimized(2, 4, 2)
    net = Net.from_fabric(fab)
    indptr, links = EcmpRouter(0).route(net, [0, 0, 0], [3, 4, 5], [1, 2, 3])
    paths = [net.node_path(links[indptr[i]:indptr[i + 1]]) for i in range(3)]
    assert paths[0] == ["h0", "nvl0", "h3"]
    assert paths[1][:2] == ["h0", "rail0"] and paths[1][-2:] == ["rail0", "h4"] and len(paths[1]) == 3
    assert paths[2][1] == "rail0" and paths[2][2].startswith("spine") and paths[2][3] == "rail1"


def test_switch_down_takes_all_its_links():
    net = Net.from_fabric(leaf_spine(2, 2, 1))
    ids = net.set_switch("spine0", up=False)
    assert len(ids) == 4 and not net.link_up[ids].any()
    indptr, links = EcmpRouter(0).route(net, np.zeros(32, np.int64), np.ones(32, np.int64),
                                         np.arange(32, dtype=np.uint64))
    assert all("spine1" in net.node_path(links[indptr[i]:indptr[i + 1]]) for i in range(32))
