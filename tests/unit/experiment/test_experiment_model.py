"""config.yaml of a run: the experiment fully resolved, so loading it back
gives the same Experiment (and therefore the same plans)."""
import dataclasses
import os

import pytest
import yaml

from badinput import InputError
from experiment import model
from experiment.plan import build_plans
from traffic import trace as trace_mod
from traffic.workload import build_workload

EXP = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments")
NAMES = sorted(n for n in os.listdir(EXP) if n.endswith(".yaml"))


def _round_trip(exp, tmp_path):
    path = tmp_path / "run" / "config.yaml"
    path.parent.mkdir(exist_ok=True)
    model.write_resolved(exp, str(path))
    back = model.load(str(path))
    return dataclasses.replace(back, source=exp.source), path


@pytest.mark.parametrize("name", NAMES)
def test_config_yaml_loads_back_to_an_equal_experiment(name, tmp_path):
    exp = model.load(os.path.join(EXP, name))
    back, _ = _round_trip(exp, tmp_path)
    assert back == exp


def test_config_yaml_spells_out_defaults_and_overrides(tmp_path):
    exp = model.load(os.path.join(EXP, "ring-fat-tree.yaml"),
                      ["scale.link=1e-5", "testbed.slice_bytes=8192", "jobs.0.workload.iterations=2"])
    back, path = _round_trip(exp, tmp_path)
    assert back == exp
    data = yaml.safe_load(path.read_text())
    assert data["scale"]["link"] == 1e-5
    assert data["topology"]["oversubscription"] == 1.0  # a builder default
    assert data["controller"] == {"policy": exp.routing, "params": {"poll_s": 0.5, "tau_s": 1.0}}
    assert data["testbed"] == {"datapath": "auto", "switch_daemons": "auto", "userspace_tso": "auto", "switch_malloc": "auto",
                               "slice_bytes": 8192, "queue_packets": 1000,
                               "timeout_s": 600.0, "ready_timeout_s": 60.0, "stall_timeout_s": 30.0}
    assert set(data["jobs"][0]) == {"name", "hosts", "order", "start_ms", "workload"}
    assert data["jobs"][0]["workload"]["iterations"] == 2


def test_trace_paths_stay_valid_from_the_run_folder(tmp_path):
    src = tmp_path / "exp"
    src.mkdir()
    t = build_workload({"collective": "all_reduce", "size_bytes": 1 << 20}, 8)
    trace_mod.dump(t, str(src / "t.json"))
    (src / "e.yaml").write_text(yaml.safe_dump({
        "name": "tr", "topology": {"kind": "single-switch", "hosts": 8},
        "scale": {"link": 2.5e-5, "bytes": 1e-3}, "jobs": [{"workload": {"trace": "t.json"}}]}))
    exp = model.load(str(src / "e.yaml"))
    back, _ = _round_trip(exp, tmp_path)
    assert back == exp
    assert os.path.isabs(back.jobs[0].workload["trace"])
    (a,), (b,) = build_plans(exp, exp.fabric()), build_plans(back, back.fabric())
    assert a.ranks == b.ranks


MINIMAL = {"name": "m", "topology": {"kind": "single-switch", "hosts": 2}, "scale": {"link": 2.5e-5, "bytes": 1e-3},
           "jobs": [{"workload": {"collective": "all_reduce", "size_bytes": 1024}}]}


def test_a_file_that_says_nothing_gets_the_dataclass_defaults():
    """Each default is written once, on the dataclass field; parse and the testbed take it from there."""
    import inspect

    from controller.registry import DEFAULT_POLICY
    from emulator.testbed.lifecycle import Testbed

    exp = model.parse(MINIMAL)
    assert (exp.testbed, exp.capture, exp.prediction) == (model.Testbed(), model.Capture(), model.Prediction())
    assert (exp.jobs[0].start_ms, exp.jobs[0].order) == (model.Job.start_ms, model.Job.order)
    assert exp.routing == DEFAULT_POLICY
    params = inspect.signature(Testbed).parameters
    for name in ("datapath", "queue_packets", "ready_timeout_s"):
        assert params[name].default == getattr(model.Testbed(), name)
    assert params["policy"].default == DEFAULT_POLICY


def test_a_setting_out_of_range_names_its_key_and_range():
    bad = {**MINIMAL, "testbed": {"slice_bytes": 100}}
    with pytest.raises(InputError, match=r"testbed.slice_bytes: expected an integer in 512..16777216, found 100"):
        model.parse(bad, "e.yaml")


@pytest.mark.parametrize("nvlink_gbps, link_mbps, refused", [
    (3600, 150, None),      # network 150 Mb/s, NVLink 1,350: kernel bridges shape past Mininet's 1,000
    (3600, 1000, None),     # network at the OVS links' top, NVLink 9,000
    (3600, 1001, "h0-rail0 would be 1e+03 Mb/s"),    # an OVS link past 1,000 Mb/s
    (14400, 300, "h0-nvl0 would be 1.08e+04 Mb/s"),  # NVLink 10,800 past its 10,000, the network at 300
])
def test_nvlink_links_may_run_faster_than_the_switch_links(nvlink_gbps, link_mbps, refused):
    link = link_mbps / 400e3
    topo = {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 2, "spines": 1, "link_gbps": 400,
            "nvlink_gbps": nvlink_gbps}
    data = {**MINIMAL, "topology": topo, "scale": {"link": link, "bytes": 40 * link}}
    if refused is None:
        assert model.parse(data).scale.link == link
    else:
        with pytest.raises(InputError, match=r"scale.link: expected emulated link rates within 0.1..1000 Mb/s, "
                                             r"NVLink 10000 \(link " + refused.replace(".", r"\.").replace("+", r"\+")):
            model.parse(data, "e.yaml")


def test_a_run_builds_its_fabric_once(tmp_path, monkeypatch):
    # Parsing spells out the builder's defaults; Experiment.fabric() asks by that spec, and must
    # get the fabric parsing built (a 131,072-GPU fat-tree takes seconds to build).
    built = []
    real = model.build_fabric
    monkeypatch.setattr(model, "build_fabric", lambda *a, **k: built.append(a) or real(*a, **k))
    monkeypatch.setattr(model, "_FABRICS", {})
    path = tmp_path / "e.yaml"
    path.write_text("name: once\nengine: flow\ntopology: {kind: fat-tree, k: 4, link_gbps: 123}\n"
                    "jobs: [{name: j, hosts: {count: 4}, workload: {collective: all_reduce, size_bytes: 1048576}}]\n")
    exp = model.load(str(path))
    assert exp.fabric() is exp.fabric()
    assert len(built) == 1
