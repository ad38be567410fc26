"""The flat copy of the routed paths (flowsim.rates RateSolver._flat): appended to as connections
are routed, made again when a route moves; at every solve it holds each connection's path."""
import numpy as np
import pytest

from flowsim import EcmpRouter, Fault, JobSpec, Net, Params, Simulation
from topologies import fat_tree
from traffic.workload import build_workload


@pytest.mark.parametrize("fault", [False, True])
def test_the_flat_paths_are_every_connections_path_at_every_solve(monkeypatch, fault):
    checked = []
    solve = Simulation._solve_rates

    def checking(self):
        solve(self)
        start, end, links = self._flat()
        for c, p in enumerate(self.C_path):
            want = np.zeros(0, np.int64) if p is None else p
            assert np.array_equal(links[start[c]:end[c]], want), c
        checked.append(self.counters["routed"])

    monkeypatch.setattr(Simulation, "_solve_rates", checking)
    fab = fat_tree(4, link_gbps=400)
    # halving-doubling opens a connection to a new partner every step: routes arrive solve by solve
    tr = build_workload({"collective": "all_reduce", "algorithm": "halving-doubling", "size_bytes": 1 << 22}, 16)
    # a core switch down mid-run moves the routes through it: the copy is made again
    faults = [Fault(2e-5, "core0")] if fault else []
    sim = Simulation(Net.from_fabric(fab), [JobSpec("j", fab.hosts[:16], tr)], EcmpRouter(0),
                     Params(collective_model="detailed"), faults=faults)
    res = sim.run()
    assert res.complete
    assert (res.counters["reroutes"] > 0) == fault
    assert len(set(checked)) > 2 and checked[-1] == res.counters["routed"]
