"""docs/rest-api.yaml says what the controller answers: every route of the adapter is in it,
and the answers of a controller in the fake network (every policy) conform. The live Ryu
process is checked against the same file in tests/integration/test_rest_api.py."""
import json
import os
import re

import pytest

from controller.testing import Sim
from tests.openapi import SPEC, errors, load_spec, schema
from topologies import fat_tree

SPECS = load_spec()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_every_route_of_the_adapter_is_documented_and_nothing_else():
    src = open(os.path.join(ROOT, "controller", "ryu_app.py")).read()
    routes = {(api_path, m.lower()) for api_path, methods in
              re.findall(r'@route\("dtnet", API \+ "([^"]+)", methods=\[([^\]]+)\]', src)
              for m in re.findall(r'"(\w+)"', methods)}
    documented = {(p[len("/dtnet/v1"):], m) for p, ops in SPECS["paths"].items() for m in ops}
    assert routes and routes == documented


@pytest.mark.parametrize("policy", ["ecmp", "congestion-aware", "coschedule"])
def test_answers_conform(policy):
    sim = Sim(fat_tree(4), policy)
    body = {"version": 1, "job": "a", "collective": "all_reduce", "period_s": 1.0, "compute_s": 0.1,
            "flows": [{"src": "h0", "dst": "h4", "size_bytes": 10 ** 6}]}
    assert errors(SPECS, schema(SPECS, "/dtnet/v1/announce", "post"), body) == []
    code, answer = sim.ctl.announce(json.dumps(body).encode(), sim.now)
    assert code == 200 and errors(SPECS, schema(SPECS, "/dtnet/v1/announce", "post", "200"), answer) == []
    code, answer = sim.ctl.announce(b"{", sim.now)
    assert code == 400 and errors(SPECS, schema(SPECS, "/dtnet/v1/announce", "post", "400"), answer) == []
    sim.start("h0", "h4", 200)
    sim.step()
    sim.set_link("agg0_0", "core0", up=False)
    sim.step()
    assert errors(SPECS, schema(SPECS, "/dtnet/v1/status", "get", "200"), sim.ctl.status()) == []
    state = json.loads(json.dumps(sim.state()))
    assert errors(SPECS, schema(SPECS, "/dtnet/v1/state", "get", "200"), state) == []
    if policy != "ecmp":
        assert state["flows"] and state["decisions"]


def test_the_check_finds_what_is_wrong():
    st = schema(SPECS, "/dtnet/v1/status", "get", "200")
    assert errors(SPECS, st, {"switches_expected": "1"})  # wrong type, fields missing
    ok = Sim(fat_tree(2), "ecmp").ctl.status()
    assert errors(SPECS, st, {**ok, "colour": 1}) == ["$: colour is not in the schema"]
    assert os.path.exists(SPEC)
