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


def test_a_dual_homed_fabric_sends_by_eth0_as_the_controller_routes():
    """Alibaba HPN: every GPU has two ToR ports; the flow engine, like the controller, uses eth0."""
    from flowsim import JobSpec, Params, Simulation
    from traffic.workload import build_workload
    fab = build("hpn", {"segments": 1, "hosts_per_segment": 2})
    net = Net.from_fabric(fab)
    assert all(net.names[net.host_switch[i]] == fab.attachment(h)[0] for i, h in enumerate(fab.hosts))
    tr = build_workload({"collective": "all_reduce", "size_bytes": 1 << 28}, len(fab.hosts), gpus_per_server=8)
    res = Simulation(net, [JobSpec("j", fab.hosts, tr)], EcmpRouter(0), Params(collective_model="bundle")).run()
    assert res.complete
    used = {net.link_name(i) for i in range(net.n_links) if res.link_bytes[i] > 0}
    eth1 = {(h, fab.attachments(h)[1][0]) for h in fab.hosts}
    assert not used & eth1
