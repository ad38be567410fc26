"""Bring your own policy, for real: a policy written in a folder outside the dtnet tree, put
on PYTHONPATH and named mymod:MyPolicy in an experiment, runs with `dtnet run` on a fat-tree
of real OVS switches and a real Ryu process; its placements show in controller-state.json,
and its ten-line test passes with controller.testing."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from controller.paths import ShortestPaths
from tests.integration.helpers import ROOT, assert_nothing_left
from topologies import fat_tree

pytestmark = pytest.mark.mininet

MYMOD = '''
"""Every new flow on the last of its equal-cost paths (by name): a policy you can recognize."""
from controller.params import Param
from controller.policy import Placement, Policy


class MyPolicy(Policy):
    PARAMS = {"poll_s": Param(0.5, gt=0), "which": Param("last", choices=("first", "last"))}
    sees_flows = True

    def flow_started(self, now, flow, obs):
        paths = obs.paths.equal_cost_paths(flow.src, flow.dst)
        if not paths:
            return None
        path = paths[-1] if self.params.which == "last" else paths[0]
        return Placement(flow.key, path, reason=f"mymod: {self.params.which} path")
'''

TEN_LINES = '''
from controller.testing import Sim
from topologies import fat_tree


def test_my_policy_puts_every_flow_on_the_last_path():
    sim = Sim(fat_tree(4), "mymod:MyPolicy")
    key = sim.start("h0", "h15", gbps=100)
    assert sim.path(key).switches == sim.ctl.paths.equal_cost_paths("h0", "h15")[-1]
    assert sim.state()["decisions"][0]["reason"] == "mymod: last path"
'''


def test_a_policy_from_outside_the_tree_runs_on_real_switches(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "mymod.py").write_text(MYMOD)
    (user / "test_mymod.py").write_text(TEN_LINES)
    env = {**os.environ, "PYTHONPATH": str(user)}
    # Its ten-line test, with the public harness.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(user / "test_mymod.py")],
                       capture_output=True, text=True, env=env, cwd=str(user), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # The experiment names it; a ring across every edge of a k=4 fat-tree crosses the core.
    exp = {"name": "mine", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
           "scale": {"link": 2.5e-5, "bytes": 1.0e-3},
           "controller": {"policy": "mymod:MyPolicy", "params": {"which": "last"}},
           "jobs": [{"name": "j0", "hosts": {"count": 8, "placement": "spread"},
                     "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 268435456,
                                  "iterations": 2}}]}
    (user / "mine.yaml").write_text(yaml.safe_dump(exp))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "dtnet", "run", str(user / "mine.yaml"), "--out", str(out)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "complete", summary["error"]
    assert summary["policy"]["name"] == "mymod:MyPolicy" and summary["policy"]["params"]["which"] == "last"
    integ = summary["integrity"]
    assert integ["bytes_sent_emulated"] == integ["bytes_received_emulated"] > 0
    cfg = json.load(open(out / "controller.json"))
    assert cfg["policy"] == {"name": "mymod:MyPolicy", "params": {"poll_s": 0.5, "which": "last"}}
    state = json.load(open(out / "controller-state.json"))
    mine = [d for d in state["decisions"] if d["reason"] == "mymod: last path"]
    # Every ring connection was placed by the policy (8 data flows, their ACK streams too).
    assert len(mine) >= 8 and state["counters"]["flows_placed"] == len(state["decisions"])
    assert state["counters"]["policy_errors"] == 0
    # And each flow took the path the policy chose: the last equal-cost one.
    paths = ShortestPaths(fat_tree(4))
    assert state["flows"] and all(tuple(f["path"]) == paths.equal_cost_paths(f["src"], f["dst"])[-1]
                                  for f in state["flows"])
    assert_nothing_left(out)
