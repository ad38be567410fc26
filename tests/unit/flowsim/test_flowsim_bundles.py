"""Bundles of chained collectives: what their stages carry, and that `auto` never changes an
answer by more than the bundle's stated agreement with the detailed model."""
from __future__ import annotations

import numpy as np
import pytest

from experiment import model
from experiment.plan import job_traces
from flowsim import EcmpRouter, JobSpec, Net, Params, Simulation
from flowsim.runner import BUNDLE_AGREEMENT, BUNDLE_DISAGREES, collective_model
from traffic.collectives.templates import (hierarchical_stages, bundle_shape, bundle_stages, template,
                                           transfer_stages)

GIB = 1 << 30


def _pairs(n, src, dst, nbytes) -> dict:
    key, inv = np.unique(np.asarray(src) * n + np.asarray(dst), return_inverse=True)
    return dict(zip(key.tolist(), np.bincount(inv, weights=nbytes).tolist()))


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def testhierarchical_stages_carry_the_schedules_bytes_without_building_it(op):
    """Closed-form stages (a 4,096-GPU schedule has 4.2 M transfers): per connection, over all
    stages, exactly the bytes the schedule sends, and the schedule's step count."""
    for servers, g, size in ((2, 2, 1000), (3, 4, 77777), (5, 3, 123456789), (4, 8, GIB + 7)):
        n = servers * g
        stages = hierarchical_stages(op, n, size, g)
        t = template(op, "hierarchical", n, size, 0, g)
        got = _pairs(n, np.concatenate([s.src for s in stages]), np.concatenate([s.dst for s in stages]),
                     np.concatenate([s.bytes for s in stages]))
        assert got == pytest.approx(_pairs(n, t.src, t.dst, t.size), rel=1e-12)
        assert sum(s.num_steps for s in stages) == t.num_steps
        assert all(0 <= a < k for k, s in enumerate(stages) for a in s.after)  # each waits on earlier ones


def test_stages_cut_where_a_send_waits_for_a_whole_receive():
    """Ring and tree steps stream (one stage); halving-doubling's step k + 2 waits for all of
    step k (send_dependencies' `earlier`), so its stages run in turn."""
    assert len(bundle_stages("all_reduce", "ring", 16, GIB)) == 1
    assert len(bundle_stages("all_reduce", "tree", 16, GIB)) == 1
    t = template("all_reduce", "halving-doubling", 16, GIB)
    stage = transfer_stages(t)
    assert [int(stage[t.step == s].max()) for s in range(t.num_steps)] == [0, 0, 1, 1, 2, 2, 3, 3]
    hd = bundle_stages("all_reduce", "halving-doubling", 16, GIB)
    assert [s.after for s in hd] == [(), (0,), (1,), (2,)]
    total = bundle_shape("all_reduce", "halving-doubling", 16, GIB)
    assert total.bytes.sum() == pytest.approx(t.size.sum())


def _rail_exp(servers: int, algorithm: str, size: int = GIB) -> model.Experiment:
    return model.parse({
        "name": "chained", "engine": "flow",
        "topology": {"kind": "rail-optimized", "servers": servers, "gpus_per_server": 8, "spines": 8,
                     "link_gbps": 400, "nvlink_gbps": 3600},
        "jobs": [{"name": "j0", "hosts": "all",
                  "workload": {"collective": "all_reduce", "algorithm": algorithm, "size_bytes": size,
                               "iterations": 1}}]})


def _cct_s(exp: model.Experiment, collective: str) -> float:
    fab = exp.fabric()
    jp = job_traces(exp, fab)[0]
    res = Simulation(Net.from_fabric(fab), [JobSpec("j0", jp.hosts, jp.trace)], EcmpRouter(0),
                     Params(collective_model=collective, slice_bytes=16384)).run()
    assert res.complete
    return res.collectives()[0]["cct_s"]


def test_auto_never_changes_an_answer_by_more_than_the_stated_agreement(monkeypatch):
    """At the size where auto switches a hierarchical all-reduce from detailed to bundle (8 GPUs a
    server, rail-optimized), both models give the same time within BUNDLE_AGREEMENT; tree and
    halving-doubling, whose bundles are outside it, stay detailed there. The switch-over is
    lowered to 8,000 transfers, so that the detailed run takes a second (at the default, 448 GPUs,
    it takes minutes: bench/bench_bundles.py runs that point)."""
    monkeypatch.setattr("flowsim.runner.AUTO_DETAILED_TRANSFERS", 8000)
    servers = 1
    while True:  # the smallest fabric auto gives to bundles
        exp = _rail_exp(servers, "hierarchical")
        picked, transfers = collective_model(exp, job_traces(exp, exp.fabric()))
        if picked == "bundle":
            break
        servers += 1
    assert transfers > 8000 and servers == 8  # 64 GPUs: 2 x 64^2 transfers as collective_transfers counts them
    detailed, bundle = _cct_s(exp, "detailed"), _cct_s(exp, "bundle")
    assert bundle == pytest.approx(detailed, rel=BUNDLE_AGREEMENT)
    for algorithm in BUNDLE_DISAGREES:
        exp = _rail_exp(servers, algorithm)
        assert collective_model(exp, job_traces(exp, exp.fabric()))[0] == "detailed"


def _ring_exp(topology: dict, hosts, routing: str = "shortest", **workload) -> model.Experiment:
    return model.parse({
        "name": "rings", "engine": "flow", "topology": topology, "controller": {"routing": routing},
        "jobs": [{"name": "j0", "hosts": hosts,
                  "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 256 << 20,
                               "iterations": 1, **workload}}]})


@pytest.mark.parametrize("topology,routing", [({"kind": "single-switch", "hosts": 150, "link_gbps": 400}, "shortest"),
                                              ({"kind": "fat-tree", "k": 10, "link_gbps": 400}, "ecmp")])
def test_rings_alone_take_bundles_where_transfers_are_no_longer_recorded(topology, routing, monkeypatch):
    """A run of rings alone leaves the detailed model where it stops recording transfers: past
    AUTO_RING_DETAILED_TRANSFERS (142 GPUs), not at 141; a tree, or a ring with a mechanism bundles
    ignore, keeps the old switch-over. At the switch-over, lowered to 2,000 transfers so that the
    detailed run takes a second, both models agree within RING_BUNDLE_AGREEMENT (on a fat-tree
    under ECMP too)."""
    from flowsim.runner import AUTO_RING_DETAILED_TRANSFERS, RING_BUNDLE_AGREEMENT, TRANSFER_EVENTS_MAX

    def auto(e):
        return collective_model(e, job_traces(e, e.fabric()))

    def ring(n, **workload):
        return _ring_exp(topology, {"count": n}, routing, **workload)

    def switch_over(limit):  # the fewest GPUs auto gives to bundles; the transfers either side of the limit
        n = next(n for n in range(2, 250) if auto(ring(n))[0] == "bundle")
        assert auto(ring(n))[1] > limit >= auto(ring(n - 1))[1]
        return n

    assert AUTO_RING_DETAILED_TRANSFERS == TRANSFER_EVENTS_MAX  # no run of rings loses its transfer events
    n = switch_over(AUTO_RING_DETAILED_TRANSFERS)
    assert n == 142
    exp = ring(n)
    for other in (ring(n, algorithm="tree"), model.parse({**model.to_dict(exp), "flow": {"window_growth": "cubic"}}),
                  model.parse({**model.to_dict(exp), "flow": {"losses": "timeouts"}})):
        assert auto(other)[0] == "detailed"
    monkeypatch.setattr("flowsim.runner.AUTO_RING_DETAILED_TRANSFERS", 2000)
    exp = ring(switch_over(2000))
    fab = exp.fabric()
    jp = job_traces(exp, fab)[0]
    cct = {m: Simulation(Net.from_fabric(fab), [JobSpec("j0", jp.hosts, jp.trace)], EcmpRouter(0),
                         Params(collective_model=m, slice_bytes=16384)).run().collectives()[0]["cct_s"]
           for m in ("detailed", "bundle")}
    assert cct["bundle"] == pytest.approx(cct["detailed"], rel=RING_BUNDLE_AGREEMENT)
