"""D-mod-K, tested with dtnet's public harness: where do the packets go?"""
import itertools

from controller.testing import Sim, delivered_pairs
from topologies import fat_tree


def stride(sim, n):
    hosts = sim.fabric.hosts
    return [sim.start(h, hosts[(i + n) % len(hosts)], gbps=400, sport=40000 + i) for i, h in enumerate(hosts)]


def test_every_pair_is_delivered_on_one_path():
    sim = Sim(fat_tree(4), "dmodk:DModK")
    assert all(delivered_pairs(sim.net).values())
    for src, dst in itertools.permutations(sim.fabric.hosts, 2):
        assert len(sim.net.all_traces(src, dst)) == 1


def test_stride_crosses_no_link_twice_where_ecmp_collides():
    dmodk, ecmp = Sim(fat_tree(4), "dmodk:DModK"), Sim(fat_tree(4), "ecmp")
    stride(dmodk, 8)
    stride(ecmp, 8)
    assert max(dmodk.link_flows(fabric_only=True).values()) == 1
    assert max(ecmp.link_flows(fabric_only=True).values()) > 1


def test_a_dead_uplink_shares_its_destinations_with_the_survivor():
    sim = Sim(fat_tree(4), "dmodk:DModK")
    sim.set_link("edge0_0", "agg0_0", up=False)
    assert all(delivered_pairs(sim.net, ["h0", "h1"]).values())


def test_its_experiment_file_checks():
    import os
    from experiment import model, sweep
    exp = model.load(os.path.join(os.path.dirname(__file__), "dmodk-stride.yaml"))
    assert [p.exp.policy for p in sweep.expand(exp)] == ["dmodk:DModK", "ecmp", "congestion-aware"]
