"""The cross-process contracts (docs/contracts.md): each round-trips through JSON, and a
message that breaks one is refused on read, naming the key."""
import json
import os
import subprocess
import sys

import pytest

from badinput import InputError
from badinput.schema import from_dict, from_json, to_dict, to_json
from controller.core import FabricController
from controller.cosched import Answer
from experiment import model
from experiment.plan import build_plans
from experiment.rankplan import RankPlan
from topologies import single_switch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXP = os.path.join(ROOT, "experiments")


@pytest.mark.parametrize("name, sets", [("ring-rail-16.yaml", []), ("gpt-small-3d.yaml", []),
                                        ("two-jobs-coschedule.yaml", []), ("straggler.yaml", [])])
def test_every_rank_plan_reads_back_equal(name, sets):
    exp = model.load(os.path.join(EXP, name), sets)
    for job in build_plans(exp, exp.fabric()):
        for plan in job.ranks:
            assert from_json(RankPlan, to_json(plan)) == plan


def _plan_dict():
    exp = model.load(os.path.join(EXP, "two-jobs-coschedule.yaml"))
    return to_dict(build_plans(exp, exp.fabric())[0].ranks[1])


@pytest.mark.parametrize("break_it, key", [
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.pop("slice_bytes"), "slice_bytes"),
    (lambda d: d.update(sends=[]), "sends"),                                  # not a plan key
    (lambda d: d["ops"][1].update(kind="teleport"), "ops[1].kind"),
    (lambda d: d["ops"][1]["sends"][0].update(dst="two"), "ops[1].sends[0].dst"),
    (lambda d: d["ops"][1].update(deps=[5]), "ops[1].deps"),                  # only earlier ops
    (lambda d: d["ops"][1]["sends"][0].update(dst=99), "ops[1].sends[0].dst"),  # not a peer
    (lambda d: d["peers"].update(x={"ip": "10.0.0.9", "port": 1}), "peers.x"),
    (lambda d: d["cosched"].update(iterations="all"), "cosched.iterations"),
])
def test_a_broken_plan_is_refused_naming_the_key(break_it, key):
    d = _plan_dict()
    break_it(d)
    with pytest.raises(InputError) as e:
        from_dict(RankPlan, d, file="rank1.json")
    assert e.value.key == key and e.value.file == "rank1.json"


def test_the_agent_refuses_a_broken_plan_with_one_error_line(tmp_path):
    d = _plan_dict()
    d["ops"][0]["duration_s"] = "long"
    path = tmp_path / "rank1.json"
    path.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, "-m", "emulator.agent", str(path)], capture_output=True, text=True,
                       timeout=30, cwd=ROOT)
    assert r.returncode == 2 and r.stderr == ""
    (line,) = r.stdout.splitlines()
    msg = json.loads(line)
    assert msg["ctl"] == "error" and f"{path}: ops[0].duration_s: expected a finite number" in msg["msg"]


@pytest.mark.parametrize("routing", ["ecmp", "coschedule"])
def test_the_controller_answers_in_the_declared_schema_whatever_the_policy(routing):
    ctl = FabricController(single_switch(2), routing)
    body = {"version": 1, "job": "j", "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1000}], "period_s": 1.0}
    code, data = ctl.announce(json.dumps(body), 0.0)
    ans = from_dict(Answer, data)
    assert code == 200 and ans.job == "j" and ans.coschedule == (routing == "coschedule")
    assert to_dict(ans) == data
