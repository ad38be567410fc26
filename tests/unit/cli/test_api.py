"""The Python API: the same checks and errors as the CLI, runs on an engine picked by name,
results read back as tables; and the example that drives it, on a stand-in engine."""
import importlib.util
import os
import sys

import pytest

import dtnet
from dtnet import engines
from experiment import pipeline
from tests.unit.experiment.fakerun import alpha_beta_engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXP = os.path.join(ROOT, "experiments")
MINIMAL = {"name": "m", "topology": {"kind": "single-switch", "hosts": 4}, "scale": {"link": 2.5e-5, "bytes": 1e-3},
           "jobs": [{"workload": {"collective": "all_reduce", "size_bytes": 1 << 24, "iterations": 2}}]}


@pytest.fixture
def fake_engine(monkeypatch):
    """The emulator's name, the alpha-beta stand-in behind it: no root."""
    calls = []

    def run(exp, out, log=print, force=False):
        calls.append(exp)
        return alpha_beta_engine(exp, out, log)
    monkeypatch.setattr(pipeline, "runner", lambda name: run)
    return calls


def test_load_set_and_check_like_the_cli():
    exp = dtnet.load(os.path.join(EXP, "demo.yaml"), ["sweep={}"])
    assert exp.name == "demo" and exp.engine == "emulate" and exp.model.sweep == ()
    one = exp.set("controller.routing", "coschedule")
    assert one.model.routing == "coschedule" and exp.model.routing == "ecmp"  # a copy; the first is unchanged
    assert one.set({"jobs.0.start_ms": 5, "scale.link": 1.25e-5}).model.jobs[0].start_ms == 5.0
    assert one.set("scale.bytes=5e-4").model.scale.bytes == 5e-4           # the --set form, read as YAML
    check = one.check()
    assert (check.fabric, check.hosts, check.jobs) == ("rail-optimized", 16, 2)
    assert "emulated host link 10 Mb/s, time dilation 40x; policy coschedule (" in str(check)
    assert "; engine emulate: " in str(check) and "MTU 9000 (sized to the 10 Mb/s switch links" in str(check)


@pytest.mark.parametrize("change, key", [
    (lambda e: e.set("scale.link", 5), "scale.link"),
    (lambda e: e.set("controller.routing", "fastest"), "controller.routing"),
    (lambda e: e.set({"jobs.3.name": "x"}), "set jobs.3"),
    (lambda e: e.set("engine", "quantum"), "engine"),
    (lambda e: e.set("jobs.0.workload.collective", "gossip").check(), "jobs[0].workload.collective"),
])
def test_bad_changes_raise_the_clis_error(change, key):
    exp = dtnet.load(os.path.join(EXP, "ring-single-switch.yaml"))
    with pytest.raises(dtnet.InputError) as e:
        change(exp)
    assert e.value.key == key and e.value.file.endswith("ring-single-switch.yaml")
    assert str(e.value).startswith(f"{e.value.file}: {key}: expected ")


def test_build_checks_a_mapping_as_a_file():
    with pytest.raises(dtnet.InputError, match="jobs: expected a value"):
        dtnet.build({k: v for k, v in MINIMAL.items() if k != "jobs"})
    assert dtnet.build(MINIMAL).check().hosts == 4


def test_an_engine_is_picked_by_name():
    assert engines.names() == ["emulate", "flow", "packet"] and callable(engines.get("flow"))
    with pytest.raises(dtnet.InputError, match="engine: expected one of emulate, flow, packet, found warp"):
        engines.get("warp")


def test_a_run_reads_back_as_tables(fake_engine, tmp_path):
    run = dtnet.build(MINIMAL).run(str(tmp_path / "r"), log=lambda m: None)
    assert isinstance(run, dtnet.Run) and run.status == "complete" and run.faithful and run.jobs == ["j0"]
    its = run.iteration_times()
    assert its.columns == ["job", "iteration", "iteration_time_s"] and len(its) == 2
    (c,) = run.collectives()
    assert c["op"] == "all_reduce" and c["busbw_gbps"] == pytest.approx(400, rel=1e-3)
    assert c["cct_vs_predicted"] == pytest.approx(1.0, rel=1e-4)
    assert {e["kind"] for e in run.events()} == {"collective"}
    assert run.links() == []                                    # this engine writes no links.csv
    again = dtnet.read(str(tmp_path / "r"))
    assert again.summary == run.summary and again.collectives() == run.collectives()


def test_a_sweep_runs_every_point_on_the_points_engine(fake_engine, tmp_path):
    exp = dtnet.build(MINIMAL).set("sweep", {"grid": {"jobs.0.workload.size_bytes": [1 << 20, 1 << 24]}})
    result = exp.run(str(tmp_path / "s"), log=lambda m: None)
    assert isinstance(result, dtnet.SweepRun) and result.failed == [] and len(fake_engine) == 2
    assert sorted(result.runs) == ["size_bytes=1048576", "size_bytes=16777216"]
    assert [r["status"] for r in result.table()] == ["complete", "complete"]
    back = dtnet.read(str(tmp_path / "s"))
    assert sorted(back.runs) == sorted(result.runs)


def test_bad_input_stops_a_run_before_anything_is_written(fake_engine, tmp_path):
    exp = dtnet.build(MINIMAL)
    with pytest.raises(dtnet.InputError, match=r"jobs\[0\]\.workload\.collective: expected one of"):
        exp.set("jobs.0.workload.collective", "gossip").run(str(tmp_path / "r"))
    assert os.listdir(tmp_path / "r") == []
    with pytest.raises(dtnet.InputError, match="sweep point 1"):  # a sweep's points are all checked first
        exp.set("sweep", {"list": [{"scale.link": 1e-5}, {"jobs.0.workload.collective": "gossip"}]}).run(
            str(tmp_path / "s"))
    assert len(fake_engine) == 1  # the single run's engine plans first and raised; no point ran
    with pytest.raises(dtnet.InputError, match="--auto-scale: expected an experiment without a sweep"):
        exp.set("sweep", {"list": [{"scale.link": 1e-5}]}).run(str(tmp_path / "s"), auto_scale=True)


def test_tables_are_dataframes_where_pandas_is_installed(fake_engine, tmp_path, monkeypatch):
    run = dtnet.build(MINIMAL).run(str(tmp_path / "r"), log=lambda m: None)
    pandas = pytest.importorskip("pandas")
    df = run.iteration_times().df
    assert isinstance(df, pandas.DataFrame) and list(df.columns) == ["job", "iteration", "iteration_time_s"]
    assert df["iteration_time_s"].tolist() == run.iteration_times().column("iteration_time_s")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as on a machine without it
    with pytest.raises(ImportError, match="pip install pandas"):
        run.collectives().df


def _example():
    path = os.path.join(ROOT, "examples", "sweep_from_python.py")
    spec = importlib.util.spec_from_file_location("sweep_from_python", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_example_checks_every_point_without_root(capsys):
    assert _example().main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "a sweep of 6 points, each valid" in out and "size_bytes=67108864,algorithm=halving-doubling" in out


def test_the_example_runs_its_sweep_and_draws_its_chart(fake_engine, tmp_path, capsys):
    from tests.unit.experiment.fakerun import is_png

    out = tmp_path / "ex"
    assert _example().main(["--out", str(out)]) == 0
    assert len(fake_engine) == 6 and is_png(out / "busbw.png")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "MiB  busbw" in ln]
    assert len(lines) == 6 and all("1.00x alpha-beta" in ln for ln in lines)
