"""The one run pipeline: every engine's folder is held, guarded and written by the same code."""
import hashlib
import json
import os

import pytest

from badinput import InputError
from badinput.paths import open_out, write_atomic
from experiment import model, pipeline
from experiment.engine import ENGINES, FolderBusy
from experiment.outputs.write import write_json
from tests.unit.experiment import fakerun

RING = {"name": "ring", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
        "scale": {"link": 2.5e-5, "bytes": 1e-3},
        "jobs": [{"name": "a", "workload": {"collective": "all_reduce", "size_bytes": 1 << 24, "iterations": 2}}]}
ENGINE_NAMES = sorted(ENGINES)


def _exp(engine: str, data=RING):
    return model.parse({**data, "engine": engine}, "ring.yaml")


def _digest(folder) -> dict:
    out = {}
    for dirpath, _, files in os.walk(folder):
        for n in files:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_second_run_into_a_held_folder_is_refused_with_one_message_on_every_engine(tmp_path, engine):
    fd = pipeline.lock_folder(str(tmp_path))
    try:
        with pytest.raises(FolderBusy) as e:
            pipeline.runner(engine)(_exp(engine), str(tmp_path), log=lambda *_: None)
    finally:
        os.close(fd)
    assert str(e.value) == (f"{tmp_path} is the folder of a dtnet run that is still going; "
                            "give this run another --out")
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_a_finished_run_is_left_intact_unless_forced(tmp_path, engine):
    fakerun.make_run(tmp_path)  # a complete run folder of another experiment
    before = _digest(tmp_path)
    with pytest.raises(InputError) as e:
        pipeline.runner(engine)(_exp(engine), str(tmp_path), log=lambda *_: None)
    assert "--out" in str(e.value) and "--force" in str(e.value) and "finished run" in str(e.value)
    assert _digest(tmp_path) == before


def test_force_overwrites_and_a_finished_run_of_the_same_experiment_is_refused_too(tmp_path):
    run = pipeline.runner("flow")
    exp = _exp("flow")
    first = run(exp, str(tmp_path), log=lambda *_: None)
    assert first["status"] == "complete"
    with pytest.raises(InputError):
        run(exp, str(tmp_path), log=lambda *_: None)
    again = run(exp, str(tmp_path), log=lambda *_: None, force=True)
    assert again["status"] == "complete"


def test_an_unfinished_run_of_the_same_experiment_runs_again_in_place(tmp_path):
    exp = _exp("flow")
    pipeline.runner("flow")(exp, str(tmp_path), log=lambda *_: None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    summary["status"] = "incomplete"
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert pipeline.runner("flow")(exp, str(tmp_path), log=lambda *_: None)["status"] == "complete"
    # ... but an unfinished run of another experiment is not overwritten without --force.
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    other = _exp("flow", {**RING, "name": "other"})
    with pytest.raises(InputError):
        pipeline.runner("flow")(other, str(tmp_path), log=lambda *_: None)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("name", ["events.jsonl", "config.yaml", "summary.json", "links.csv",
                                  "controller-state.json", "plots/links.png"])
def test_a_link_planted_in_the_run_folder_is_refused_and_its_target_untouched(tmp_path, engine, name):
    out, target = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    target.write_text("precious")
    (out / name).parent.mkdir(exist_ok=True)
    (out / name).symlink_to(target)
    with pytest.raises(InputError) as e:
        pipeline.runner(engine)(_exp(engine), str(out), log=lambda *_: None)
    assert "symbolic link" in str(e.value) and name in str(e.value)
    assert target.read_text() == "precious"


def test_the_writers_never_write_through_a_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious")
    (tmp_path / "a.json").symlink_to(target)
    with pytest.raises(InputError):
        open_out(str(tmp_path), "a.json")
    (tmp_path / "summary.json").symlink_to(target)
    write_json(str(tmp_path / "summary.json"), {"x": 1})  # the rename replaces the link itself
    assert target.read_text() == "precious"
    assert not (tmp_path / "summary.json").is_symlink() and json.loads((tmp_path / "summary.json").read_text())
    (tmp_path / "summary.json.tmp").symlink_to(target)  # the old fixed temporary name: not used
    write_atomic(str(tmp_path), "summary.json", text="{}")
    assert target.read_text() == "precious"


def test_a_new_engine_is_one_class(tmp_path):
    """An engine that supplies only its plans, its execution and its summary gets the folder, the
    lock, config.yaml, events.jsonl and the outputs from the pipeline."""
    from experiment.outputs.summary import build
    from experiment.plan import job_traces

    class Instant(pipeline.Engine):
        name, label, keep_events = "instant", "instant engine", True

        def plan(self, exp, fabric):
            return job_traces(exp, fabric)

        def execute(self, run):
            run.t_start = 0.0
            run.events.add({"kind": "compute", "job": "a", "rank": 0, "op_id": "it0/c", "start": 0.0, "end": 1e-3})
            run.status = "complete"

        def summary(self, run):
            return build(run.exp, run.fabric, run.jobs, run.events.events, status=run.status, error=run.error,
                         bytes_received=0, real_units=True, engine={"engine": "instant"})

    said = []
    s = pipeline.run(Instant(), _exp("flow"), str(tmp_path), log=said.append)
    assert said == []  # no output failed
    assert s["status"] == "complete"
    assert {"config.yaml", "events.jsonl", "summary.json", "trace.json"} <= set(os.listdir(tmp_path))
    assert "run by" not in (tmp_path / "config.yaml").read_text().splitlines()[2]
    assert json.loads((tmp_path / "events.jsonl").read_text().splitlines()[0])["kind"] == "compute"


def test_a_runs_reference_cycles_do_not_outlive_the_next_run(monkeypatch):
    """settled() freezes what a run made; a script running one experiment after another grew by
    3.4 MB a run (bench/bench_soak.py) until the next run collects the last one's cycles."""
    import gc
    import weakref

    class Node:
        pass

    monkeypatch.setattr(pipeline, "_RUNS_SETTLED", 0)
    with pipeline.settled() as settle:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made during the run, as the outputs' figures make
        gone = weakref.ref(a)
        settle()
        del a, b
    assert gone() is not None  # frozen, then back in the oldest generation: not collected yet
    gc_was = gc.isenabled()
    gc.disable()  # only the next run's own pass may collect it
    try:
        with pipeline.settled():
            assert gone() is None
    finally:
        if gc_was:
            gc.enable()


def test_outputs_plots_false_writes_the_data_files_and_no_plots(tmp_path, capsys):
    from dtnet import cli

    exp_file = tmp_path / "ring.yaml"
    exp_file.write_text(json.dumps({**RING, "engine": "flow"}))
    with_plots, without = tmp_path / "with", tmp_path / "without"
    assert cli.main(["run", str(exp_file), "--out", str(with_plots)]) == 0
    assert cli.main(["run", str(exp_file), "--out", str(without), "--no-plots"]) == 0
    assert sorted(os.listdir(with_plots / "plots"))  # the default draws them
    assert not (without / "plots").exists()
    data = ["config.yaml", "events.jsonl", "links.csv", "summary.json", "trace.json"]
    assert sorted(os.listdir(without)) == data
    # the same run otherwise: summary.json equal but for the config it records
    a, b = (json.loads((d / "summary.json").read_text()) for d in (with_plots, without))
    assert a["jobs"] == b["jobs"]
    again = model.load(str(without / "config.yaml"))  # config.yaml says so, and repeats it
    assert again.outputs.plots is False and model.load(str(exp_file)).outputs.plots is True
    # a finished run forced again without plots keeps none of the old ones
    assert cli.main(["run", str(exp_file), "--out", str(with_plots), "--force", "--set", "outputs.plots=false"]) == 0
    assert not (with_plots / "plots").exists()
    capsys.readouterr()
    assert cli.main(["run", str(exp_file), "--out", str(tmp_path / "bad"), "--set", "outputs.plots=1"]) == 2
    assert capsys.readouterr().err.strip().endswith("outputs.plots: expected true or false, found 1")
    assert not (tmp_path / "bad").exists()
