"""The experiment names its controller policy: controller: {policy, params} (routing: the old
name), the params resolved into config.yaml and summary.json, plug-ins in sweeps."""
import json
import os
import sys
import textwrap

import pytest
import yaml

from badinput import InputError
from controller import config as controller_config
from emulator.run.runner import Emulation, summarize
from experiment import model, sweep
from experiment.plan import build_plans
from tests.unit.experiment.fakerun import EXPERIMENT

BASE = {"name": "p", "topology": {"kind": "fat-tree", "k": 4}, "scale": {"link": 2.5e-5, "bytes": 1e-3},
        "jobs": [{"name": "j", "hosts": {"count": 4},
                  "workload": {"collective": "all_reduce", "size_bytes": 1 << 24, "iterations": 2,
                               "compute_ms": 1}}]}


@pytest.fixture
def mymod(tmp_path, monkeypatch):
    """A user's policy module in a folder outside the tree, put on the path."""
    (tmp_path / "mymod.py").write_text(textwrap.dedent("""
        from controller.params import Param
        from controller.policy import Answer, Policy

        class Mine(Policy):
            PARAMS = {"spread": Param(2, ge=1, le=8)}

        class Announcing(Policy):
            coschedules = True

            def announce(self, now, ann, obs):
                return Answer(ann.job, start_offset_s=0.001, coschedule=True)
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("mymod", None)


def _exp(controller, **extra):
    return model.parse({**BASE, "controller": controller, **extra}, "p.yaml")


def test_policy_and_params_resolve_with_every_default():
    exp = _exp({"policy": "congestion-aware", "params": {"hold_s": 1}})
    assert exp.policy == exp.routing == "congestion-aware"
    assert exp.policy_params == {"poll_s": 0.5, "tau_s": 1.0, "elephant_fraction": 0.1, "hold_s": 1.0,
                                 "idle_timeout_s": 30, "max_paths": 256}
    assert not exp.coschedules and _exp({"policy": "coschedule"}).coschedules


def test_routing_is_the_old_name_of_policy():
    assert _exp({"routing": "shortest"}) == _exp({"policy": "shortest"})
    assert _exp({}).policy == "ecmp"


def test_config_yaml_holds_the_resolved_params_and_runs_the_same(tmp_path):
    exp = _exp({"policy": "coschedule", "params": {"low_share": 0.5}})
    path = tmp_path / "config.yaml"
    model.write_resolved(exp, str(path))
    data = yaml.safe_load(path.read_text())
    assert data["controller"]["policy"] == "coschedule" and data["controller"]["params"]["low_share"] == 0.5
    assert data["controller"]["params"]["offset_steps"] == 50
    assert model.load(str(path)).policy_params == exp.policy_params


def test_summary_names_the_policy_and_its_params(tmp_path):
    exp = model.parse({**EXPERIMENT, "controller": {"policy": "congestion-aware", "params": {"hold_s": 4}}},
                      "fake.yaml")
    fabric = exp.fabric()
    open(tmp_path / "events.jsonl", "w").close()
    summary = summarize(exp, fabric, build_plans(exp, fabric), str(tmp_path / "events.jsonl"),
                         Emulation(datapath="userspace"), "complete", None)
    json.dumps(summary)
    assert summary["policy"] == {"name": "congestion-aware", "params": exp.policy_params}
    assert summary["policy"]["params"]["hold_s"] == 4.0


def test_a_plug_in_policy_is_named_as_package_module_class(mymod):
    exp = _exp({"policy": "mymod:Mine", "params": {"spread": 3}})
    assert exp.policy_params == {"spread": 3}
    with pytest.raises(InputError, match=r"controller.params.spread: expected an integer in 1..8, found 9"):
        _exp({"policy": "mymod:Mine", "params": {"spread": 9}})


def test_a_plug_in_that_coschedules_gets_announcements_planned(mymod):
    exp = _exp({"policy": "mymod:Announcing"})
    fabric = exp.fabric()
    (jp,) = build_plans(exp, fabric)
    assert exp.coschedules and jp.ranks[0].cosched.announce
    (plain,) = build_plans(_exp({"policy": "mymod:Mine"}), fabric)
    assert all(r.cosched is None for r in plain.ranks)


def test_a_sweep_compares_a_plug_in_with_the_builtins(mymod):
    exp = _exp({"policy": "ecmp"}, sweep={"grid": {"controller.policy": ["ecmp", "congestion-aware", "mymod:Mine"]}})
    points = sweep.expand(exp)
    assert [p.exp.policy for p in points] == ["ecmp", "congestion-aware", "mymod:Mine"]
    assert [p.slug for p in points] == ["policy=ecmp", "policy=congestion-aware", "policy=mymod_Mine"]


def test_a_sweep_over_a_param_and_a_bad_point_named_first(mymod):
    exp = _exp({"policy": "congestion-aware"}, sweep={"grid": {"controller.params.hold_s": [0.5, 4]}})
    assert [p.exp.policy_params["hold_s"] for p in sweep.expand(exp)] == [0.5, 4.0]
    bad = _exp({"policy": "ecmp"}, sweep={"grid": {"controller.policy": ["ecmp", "mymod:Missing"]}})
    with pytest.raises(InputError, match=r"sweep point 1 \(policy=mymod_Missing\): controller.policy: expected a class"):
        sweep.expand(bad)


def test_the_controller_configuration_file_round_trips_and_refuses_what_is_wrong(tmp_path):
    from topologies import fat_tree
    fat_tree(4).dump(str(tmp_path / "fabric.json"))
    cfg = controller_config.make(str(tmp_path / "fabric.json"), "congestion-aware", {"hold_s": 1}, ofp_port=7000,
                                 rest_port=7001, link_scale=1e-3, log_file=str(tmp_path / "controller.log"))
    cfg.write(str(tmp_path / "controller.json"))
    data = json.loads((tmp_path / "controller.json").read_text())
    assert data["fabric"] == "fabric.json" and data["log_file"] == "controller.log"  # inside the run folder
    assert controller_config.load(str(tmp_path / "controller.json")) == cfg
    for change, words in [({"version": 2}, "version: expected 1"), ({"colour": 1}, "colour"),
                          ({"policy": {"name": "magic"}}, "policy.name: expected one of"),
                          ({"policy": {"name": "ecmp", "params": {"hold_s": 1}}}, "policy.params.hold_s"),
                          ({"rest": {"host": "localhost", "port": 1}}, "rest.host: expected an IP address"),
                          ({"openflow": {"port": 70000}}, "openflow.port"), ({"link_scale": 0}, "link_scale"),
                          ({"fabric": "missing.json"}, "fabric: expected a readable fabric JSON")]:
        (tmp_path / "bad.json").write_text(json.dumps({**data, **change}))
        with pytest.raises(InputError) as e:
            controller_config.load(str(tmp_path / "bad.json"))
        assert words in str(e.value) and str(e.value).startswith(str(tmp_path / "bad.json")), str(e.value)


def test_setting_policy_replaces_routing_and_back():
    """--set controller.policy on a file that says routing: (its old name), and the reverse."""
    old = model.parse(model.apply_overrides({**BASE, "controller": {"routing": "ecmp"}},
                                            ["controller.policy=congestion-aware"]))
    assert old.routing == "congestion-aware"
    new = model.parse(model.apply_overrides({**BASE, "controller": {"policy": "congestion-aware"}},
                                            ["controller.routing=shortest"]))
    assert new.routing == "shortest"
    with pytest.raises(InputError, match="either policy or routing"):
        model.parse({**BASE, "controller": {"policy": "ecmp", "routing": "shortest"}})
