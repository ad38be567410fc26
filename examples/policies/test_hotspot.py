"""Hot-spot relief, tested with dtnet's public harness: a closed loop of simulated load."""
from controller.testing import Sim
from topologies import fat_tree


def test_flows_that_start_together_collide_and_the_polls_pull_them_apart():
    sim = Sim(fat_tree(4), "hotspot:HotSpot", moves_per_poll=2)
    keys = [sim.start(f"h{i}", f"h{i + 4}", gbps=400, sport=1000 + i) for i in range(4)]  # pod 0 -> pod 1
    assert max(sim.link_flows(fabric_only=True).values()) == 4  # no load seen yet: one path for all
    for _ in range(4):
        sim.step()
    assert max(sim.link_flows(fabric_only=True).values()) == 1
    assert sim.state()["counters"]["hot_links_relieved"] == 3
    assert all(sim.path(k).delivered for k in keys)
    assert sim.step() == []  # nothing hot: nothing moves


def test_a_cool_fabric_moves_nothing():
    sim = Sim(fat_tree(4), "hotspot:HotSpot")
    sim.start("h0", "h4", gbps=100)
    sim.start("h1", "h5", gbps=100)
    assert [sim.step() for _ in range(3)] == [[], [], []]


def test_its_experiment_file_checks():
    import os
    from experiment import model
    exp = model.load(os.path.join(os.path.dirname(__file__), "hotspot-stride.yaml"))
    assert exp.policy == "hotspot:HotSpot" and exp.policy_params["moves_per_poll"] == 1
