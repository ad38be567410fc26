"""Placement of jobs on hosts: packed, spread, random, whole servers; jobs never share a host."""
import pytest

from badinput import InputError
from experiment import model, placement
from experiment.outputs.summary import aggregate
from experiment.plan import build_plans
from topologies import from_spec

FAT = from_spec("fat-tree:k=4")                                    # h0,h1 on edge0_0; h2,h3 on edge0_1; ...
LEAF = from_spec("leaf-spine:leaves=3,spines=2,hosts_per_leaf=4")  # h0..h3 on leaf0; ...
RAIL = from_spec("rail-optimized:servers=4,gpus_per_server=4,spines=2")  # server s: h4s..h4s+3


def edges(fab, hosts):
    return [fab.attachment(h)[0] for h in hosts]


def test_groups_are_edges_leaves_or_servers():
    assert placement.host_groups(FAT)[:2] == [["h0", "h1"], ["h2", "h3"]]
    assert placement.host_groups(LEAF) == [[f"h{i}" for i in range(j, j + 4)] for j in (0, 4, 8)]
    assert placement.host_groups(RAIL)[1] == ["h4", "h5", "h6", "h7"]


@pytest.mark.parametrize("fab,expected", [
    (FAT, ["h0", "h1", "h2", "h3", "h4"]),  # edge0_0 full, edge0_1 full, then pod 1
    (LEAF, ["h0", "h1", "h2", "h3", "h4"]),
    (RAIL, ["h0", "h1", "h2", "h3", "h4"]),  # server 0, then server 1
])
def test_packed_fills_groups_in_order(fab, expected):
    assert placement.pick(fab, 5, "packed", set(fab.hosts)) == expected


def test_spread_takes_pods_in_turn_on_a_fat_tree():
    hosts = placement.pick(FAT, 4, "spread", set(FAT.hosts))
    assert hosts == ["h0", "h4", "h8", "h12"]
    assert len({FAT.node(h)["pod"] for h in hosts}) == 4
    eight = placement.pick(FAT, 8, "spread", set(FAT.hosts))
    assert len(set(edges(FAT, eight))) == 8  # one host under every edge switch


def test_spread_round_robins_leaves_and_servers():
    assert edges(LEAF, placement.pick(LEAF, 6, "spread", set(LEAF.hosts))) == \
        ["leaf0", "leaf0", "leaf1", "leaf1", "leaf2", "leaf2"]
    hosts = placement.pick(RAIL, 4, "spread", set(RAIL.hosts))
    assert sorted(RAIL.node(h)["server"] for h in hosts) == [0, 1, 2, 3]


@pytest.mark.parametrize("fab", [FAT, LEAF, RAIL])
def test_random_is_seeded_and_stays_in_the_free_hosts(fab):
    free = set(fab.hosts[2:])
    a = placement.pick(fab, 5, "random", free, seed=7)
    assert a == placement.pick(fab, 5, "random", free, seed=7)
    assert set(a) <= free and len(set(a)) == 5
    draws = {tuple(placement.pick(fab, 5, "random", free, seed=s)) for s in range(10)}
    assert len(draws) > 1


def test_counted_jobs_take_what_explicit_jobs_leave():
    jobs = [("a", {"count": 2, "placement": "packed"}), ("b", ["h0", "h1"]),
            ("c", {"count": 4, "placement": "spread"})]
    a, b, c = placement.place(jobs, FAT)
    assert b == ["h0", "h1"] and a == ["h2", "h3"]
    assert not set(c) & set(a + b)
    assert len({FAT.node(h)["pod"] for h in c}) == 3  # pod 0 is full


def test_whole_servers_by_id_or_count():
    a, b = placement.place([("a", {"servers": 1}), ("b", {"servers": [0, 2]})], RAIL)
    assert b == ["h0", "h1", "h2", "h3", "h8", "h9", "h10", "h11"]
    assert a == ["h4", "h5", "h6", "h7"]  # the first server b left whole


def test_sharing_a_host_names_both_jobs():
    with pytest.raises(InputError) as e:
        placement.place([("a", ["h0", "h3"]), ("b", "all")], FAT)
    assert e.value.key == "jobs[1].hosts" and "jobs a and b both have h0" in str(e.value)


def test_a_count_that_does_not_fit_says_how_many_are_left():
    with pytest.raises(InputError) as e:
        placement.place([("a", {"count": 10, "placement": "packed"}), ("b", {"count": 8, "placement": "spread"})],
                        FAT)
    assert e.value.key == "jobs[1].hosts.count" and "at most 6" in str(e.value)


EXP = {"name": "p", "topology": {"kind": "rail-optimized", "servers": 4, "gpus_per_server": 4, "spines": 2},
       "scale": {"link": 2.5e-5, "bytes": 1e-3}}
AR = {"collective": "all_reduce", "size_bytes": 1 << 20}


def _exp(*jobs, topology=None):
    return model.parse({**EXP, **({"topology": topology} if topology else {}),
                         "jobs": [{"name": f"j{i}", "hosts": h, "workload": AR} for i, h in enumerate(jobs)]}, "e.yaml")


def test_config_fills_placement_defaults_and_round_trips():
    exp = _exp({"count": 4}, {"count": 4, "placement": "random"}, {"servers": [3]})
    assert exp.jobs[0].hosts == {"count": 4, "placement": "packed"}
    assert exp.jobs[1].hosts == {"count": 4, "placement": "random", "seed": 0}
    assert model.parse(model.to_dict(exp), "e.yaml") == exp
    jobs = build_plans(exp, exp.fabric())
    assert [j.hosts for j in jobs][2] == ["h12", "h13", "h14", "h15"]
    assert len({h for j in jobs for h in j.hosts}) == 12


@pytest.mark.parametrize("hosts,key,topology", [
    ({"servers": 1}, "jobs[0].hosts.servers", {"kind": "fat-tree", "k": 4}),
    ({"servers": [0, 4]}, "jobs[0].hosts.servers", None),
    ({"servers": 5}, "jobs[0].hosts.servers", None),
    ({"count": 4, "placement": "scattered"}, "jobs[0].hosts.placement", None),
    ({"count": 4, "seed": 3}, "jobs[0].hosts.seed", None),
    ({"count": 4, "extra": 1}, "jobs[0].hosts.extra", None),
])
def test_bad_placements_name_the_key(hosts, key, topology):
    with pytest.raises(InputError) as e:
        _exp(hosts, topology=topology)
    assert f"e.yaml: {key}:" in str(e.value)


def test_jobs_sharing_hosts_fail_at_load_naming_both():
    with pytest.raises(InputError) as e:
        _exp({"servers": [0]}, ["h3", "h4"])
    assert str(e.value).startswith("e.yaml: jobs[1].hosts:") and "jobs j0 and j1 both have h3" in str(e.value)


def test_aggregate_across_jobs():
    def job(name, its, busbw, count):
        return {"name": name, "ranks": 4, "iterations": len(its),
                "iteration_time_s": {"mean": sum(its) / len(its), "all": its},
                "collectives": [{"busbw_gbps": busbw, "count": count}]}
    events = [{"kind": "compute", "job": "a", "start": 10.0, "end": 11.0},
              {"kind": "collective", "job": "b", "start": 10.5, "end": 14.0}]
    agg = aggregate([job("a", [1.0, 3.0], 100.0, 1), job("b", [4.0], 400.0, 3)], events, dilation=2.0)
    assert agg["jobs"] == 2 and agg["ranks"] == 8
    assert agg["iteration_time_s_mean"] == 3.0 and agg["iteration_time_s_max"] == 4.0
    assert agg["busbw_gbps_mean"] == 325.0
    assert agg["makespan_s"] == 2.0


def test_placing_the_same_jobs_again_gives_equal_lists_the_caller_owns():
    jobs = [("a", {"count": 3, "placement": "spread"}), ("b", {"count": 2})]
    first = placement.place(jobs, FAT)
    first[0].append("h15")  # a caller's lists are its own: the next answer must not see this
    again = placement.place(jobs, FAT)
    assert again == placement._place(jobs, FAT) and "h15" not in again[0]
    other = placement.place([("a", {"count": 3, "placement": "packed"})], FAT)  # not the remembered jobs
    assert other == [["h0", "h1", "h2"]]
