"""`engine: flow` end to end, without root: the experiment file, `dtnet run --engine flow`,
`check`, sweeps over engines, `report` and `compare`, on the same outputs the emulator writes."""
from __future__ import annotations

import csv
import glob
import json
import os

import pytest
import yaml

from dtnet.cli import main
from experiment import model
from experiment.outputs.report import load_summary

HERE = os.path.dirname(__file__)
EXPERIMENTS = os.path.join(HERE, "..", "..", "..", "experiments")
GIB = 1 << 30


def write(tmp_path, data: dict, name="exp.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def ring(n=8, size=GIB, iterations=2, **extra):
    return {"name": "ring", "engine": "flow", "topology": {"kind": "single-switch", "hosts": n, "link_gbps": 400},
            "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_reduce", "algorithm": "ring",
                                                                  "size_bytes": size, "iterations": iterations}}],
            **extra}


def run(path, out, *more) -> int:
    return main(["run", path, "--out", str(out), *more])


def test_flow_needs_no_scale_and_writes_the_emulators_outputs(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(write(tmp_path, ring()), out) == 0
    s = load_summary(str(out))  # the summary.json contract of DESIGN.md
    assert s["engine"] == "flow" and s["status"] == "complete"
    assert s["scale"] == {"link": 1.0, "bytes": 1.0, "dilation": 1.0}
    assert "statements" in s["model"] and s["fidelity"]["engine"] == "flow"
    (c,) = s["jobs"][0]["collectives"]
    # Ring all-reduce on one switch: 2 (n-1)/n x S at the NIC rate, and busbw = the link rate.
    expect = 2 * 7 / 8 * GIB * 8 / 400e9
    assert c["cct_s"] == pytest.approx(expect, rel=1e-6)
    assert c["busbw_gbps"] == pytest.approx(400.0, rel=1e-6)
    assert c["predicted_cct_s"] == pytest.approx(expect, rel=1e-3)
    events = [json.loads(line) for line in open(out / "events.jsonl")]
    ops = [e for e in events if e["kind"] == "collective"]
    assert len(ops) == 8 * 2 and all({"job", "rank", "start", "end", "ready"} <= set(e) for e in ops)
    assert any(e["kind"] == "transfer" for e in events)
    trace = json.load(open(out / "trace.json"))
    assert any(e.get("cat") == "collective" for e in trace["traceEvents"])
    rows = list(csv.DictReader(open(out / "links.csv")))
    assert rows and max(float(r["util"]) for r in rows) == pytest.approx(1.0, rel=1e-6)
    assert os.path.exists(out / "plots" / "iteration_time.png")
    # config.yaml repeats the run: the same experiment, engine included, no scale invented.
    again = model.load(str(out / "config.yaml"))
    assert model.to_dict(again) == model.to_dict(model.load(write(tmp_path, ring())))
    assert again.engine == "flow" and not again.scale_given
    printed = capsys.readouterr().out
    assert "model: flow engine" in printed and "fidelity:" not in printed


def test_engine_flag_runs_an_emulator_file_on_the_flow_engine(tmp_path):
    data = ring()
    del data["engine"]
    data["scale"] = {"link": 2.5e-5, "bytes": 1e-3}
    path = write(tmp_path, data)
    assert run(path, tmp_path / "out", "--engine", "flow") == 0
    s = load_summary(str(tmp_path / "out"))
    assert s["engine"] == "flow"
    # It mirrors the emulator: the agents' 16 KiB emulated slice is 16.4 MB of real bytes.
    assert s["model"]["slice_bytes"] == pytest.approx(16384 / 1e-3)
    assert s["model"]["mirrors_scale"]["dilation"] == pytest.approx(40.0)
    assert model.load(str(tmp_path / "out" / "config.yaml")).engine == "flow"


def test_emulate_still_needs_scale(tmp_path, capsys):
    data = ring()
    data["engine"] = "emulate"
    assert main(["check", write(tmp_path, data)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "scale" in err


def test_bad_engine_and_flow_keys_are_one_line_errors(tmp_path, capsys):
    for bad, key in (({"engine": "ns3"}, "engine"), ({"flow": {"collective_model": "fast"}}, "flow.collective_model"),
                     ({"flow": {"ecmp_seed": -1}}, "flow.ecmp_seed"), ({"flow": {"speed": 1}}, "flow.speed")):
        assert main(["check", write(tmp_path, {**ring(), **bad})]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and key in err and "Traceback" not in err


def test_check_refuses_what_the_flow_engine_cannot_model(tmp_path, capsys):
    data = {**ring(), "capture": {"links": [["h0", "s0"]]}}
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    path = write(tmp_path, data)
    assert main(["check", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "capture.links" in err and "engine: emulate" in err
    assert run(path, out) == 2  # refused before anything is written
    assert sorted(os.listdir(out)) == ["keep.txt"]
    assert main(["run", path, "--out", str(out), "--auto-scale", "--engine", "flow"]) == 2


def test_a_real_program_is_refused_on_the_flow_engine(capsys):
    """A program's traffic is its own, not a trace the model can replay: one line, exit 2."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "gloo-allreduce.yaml")
    assert main(["check", path, "--engine", "flow"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "jobs[0].workload.command" in err and "only on the emulator" in err


def test_check_says_what_the_flow_engine_will_run(tmp_path, capsys):
    assert main(["check", write(tmp_path, ring())]) == 0
    line = capsys.readouterr().out.strip()
    assert "engine flow" in line and "routing ecmp (ECMP seed 0)" in line


def test_a_sweep_over_engines_checks_both_and_runs_flow_points(tmp_path, capsys):
    data = {**ring(), "scale": {"link": 2.5e-5, "bytes": 1e-3}, "sweep": {"grid": {"engine": ["emulate", "flow"]}}}
    assert main(["check", write(tmp_path, data)]) == 0
    assert "a sweep of 2 points" in capsys.readouterr().out
    flow_only = {**ring(), "sweep": {"grid": {"controller.routing": ["ecmp", "shortest"],
                                              "flow.ecmp_seed": [0, 1]}}}
    out = tmp_path / "sweep"
    assert run(write(tmp_path, flow_only, "s.yaml"), out) == 0
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert len(rows) == 4 and {r["engine"] for r in rows} == {"flow"} and {r["status"] for r in rows} == {"complete"}
    printed = capsys.readouterr().out
    table = printed[printed.index("\npoint "):]
    assert table.count(" model\n") == 4  # the fidelity column says a model made each point
    # Resumes: every point is complete already.
    assert run(write(tmp_path, flow_only, "s.yaml"), out) == 0
    assert "skipped" not in printed and capsys.readouterr().out.count("skipped, complete") == 4


def test_report_and_compare_name_the_engine(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(write(tmp_path, ring()), a) == 0
    assert run(write(tmp_path, ring(size=GIB // 4)), b) == 0
    capsys.readouterr()
    assert main(["report", str(a)]) == 0
    assert "engine flow" in capsys.readouterr().out
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "engine flow" in out and "model (flow)" in out


# Files of experiments/ that run in about a second each on the flow engine, base point only
# (bench/bench_engines.py and docs/flow-engine.md cover every file and every point).
QUICK = ("ring-single-switch", "ring-fat-tree", "ring-rail-16", "straggler", "stride-fat-tree", "stride-single-switch",
         "staggered-fat-tree", "link-down-fat-tree", "switch-down-fat-tree", "controller-restart",
         "two-jobs-coschedule", "three-jobs-contending", "demo", "sweep-placement", "sweep-routing",
         "moe-a2a-fat-tree", "gpt-small-3d")


@pytest.mark.parametrize("name", QUICK)
def test_experiment_files_complete_on_the_flow_engine(tmp_path, name):
    path = os.path.join(EXPERIMENTS, f"{name}.yaml")
    out = tmp_path / name
    assert main(["run", path, "--out", str(out), "--engine", "flow", "--set", "sweep={}"]) == 0
    s = load_summary(str(out))
    assert s["status"] == "complete" and s["engine"] == "flow"
    exp = model.load(path)
    assert [j["name"] for j in s["jobs"]] == [j.name for j in exp.jobs]
    assert all(j["iterations"] >= 1 for j in s["jobs"])
    if exp.faults:
        assert len(s["faults"]) == len(exp.faults) and all(f["ok"] for f in s["faults"])


# Cluster-scale files: their base point only (a sweep point each builds a fabric of 1,024 to 27,648
# hosts); ring-131072.yaml takes 7 s to check (137,842 hosts) and is left to its own run.
LARGE = ("gpt3-175b-1024", "gpt3-175b-16384", "jobs-1024-policies", "moe-a2a-1024")


def test_every_experiment_file_is_checked_for_the_flow_engine(capsys):
    files = sorted(glob.glob(os.path.join(EXPERIMENTS, "*.yaml")))
    assert files
    for path in files:
        name = os.path.basename(path)[:-5]
        if name == "ring-131072":
            continue
        assert main(["check", path, "--engine", "flow", *(["--set", "sweep={}"] if name in LARGE else [])]) == 0, path


def test_rank_classes_through_dtnet_run(tmp_path):
    """A model preset at bundle: one simulated rank per class, the outputs saying so."""
    path = os.path.join(EXPERIMENTS, "gpt-small-3d.yaml")
    out = tmp_path / "classes"
    assert main(["run", path, "--out", str(out), "--engine", "flow", "--set", "flow.collective_model=bundle"]) == 0
    s = load_summary(str(out))
    (job,) = s["jobs"]
    assert job["ranks"] == 8 and job["ranks_simulated"] == 2
    assert any("rank classes" in st for st in s["model"]["statements"])
    events = [json.loads(line) for line in open(out / "events.jsonl")]
    ops = [e for e in events if e["kind"] in ("compute", "collective", "send", "recv")]
    assert {e["rank"] for e in ops} == {0, 4} and all(e["class_ranks"] == 4 for e in ops)
    # Groups and peers are the concrete ones of the rank shown: a tp group, a dp group, the next stage.
    groups = {e["group"] for e in ops if e["kind"] == "collective"}
    assert {"tp-p0-d0", "dp-p0-t0", "tp-p1-d0", "dp-p1-t0"} <= groups
    assert {e["peer"] for e in ops if e["kind"] == "send" and e["rank"] == 0} == {4}
    # The same iteration time as every rank simulated (the detailed default of this file).
    ref = tmp_path / "detailed"
    assert main(["run", path, "--out", str(ref), "--engine", "flow"]) == 0
    assert job["iteration_time_s"]["mean"] == pytest.approx(load_summary(str(ref))["jobs"][0]["iteration_time_s"]["mean"],
                                                            rel=1e-3)


def test_a_trace_file_workload_runs_on_both_models(tmp_path):
    """workload: {trace: FILE}: a compact trace written by `dtnet trace generate`, per rank
    (detailed) and by rank class (bundle), the same iteration time."""
    trace = tmp_path / "gpt.json"
    assert main(["trace", "generate", "--model", "gpt-small", "--gpus", "8", "--tp", "2", "--pp", "2", "--dp", "2",
                 "--microbatches", "2", "--iterations", "1", "--out", str(trace)]) == 0
    exp = {"name": "from-file", "engine": "flow",
           "topology": {"kind": "rail-optimized", "servers": 2, "gpus_per_server": 4, "spines": 2},
           "jobs": [{"name": "gpt", "hosts": "all", "start_ms": 1.5, "workload": {"trace": str(trace)}}]}
    times = []
    for model_ in ("detailed", "bundle"):
        out = tmp_path / model_
        assert run(write(tmp_path, {**exp, "flow": {"collective_model": model_}}), out) == 0
        s = load_summary(str(out))
        events = [json.loads(line) for line in open(out / "events.jsonl")]
        assert min(e["start"] for e in events if "start" in e and e.get("job") == "gpt") == pytest.approx(1.5e-3)
        times.append(s["jobs"][0]["iteration_time_s"]["mean"])
    assert times[0] == pytest.approx(times[1], rel=1e-3)
