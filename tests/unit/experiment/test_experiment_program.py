"""Real-program workloads without root: the command is checked word by word, every rank gets
torchrun's environment, and marker lines become events that summary.json turns into
iteration times and collective bandwidth in real-cluster units."""
import importlib.util
import io
import json
import os
import textwrap

import pytest

from badinput import InputError
from dtnet import program as helper
from experiment import model, program
from experiment.outputs.summary import job_results
from experiment.plan import build_plans
from topologies import leaf_spine, rail_optimized

KEY = "jobs[0].workload"


def _exp(tmp_path, workload, topology="{kind: single-switch, hosts: 4, link_gbps: 400}", extra=""):
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\ntopology: {topology}\nscale: {{link: 2.5e-5, bytes: 1.0e-3}}\n"
                    f"jobs:\n  - name: j\n    workload: {json.dumps(workload)}\n{extra}")
    return model.load(str(path))


def test_a_script_path_is_made_absolute_beside_the_experiment(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    exp = _exp(tmp_path, {"command": ["python", "-u", "train.py", "--steps", 3]})
    words = exp.jobs[0].workload["command"]
    assert words == ["python", "-u", str(tmp_path / "train.py"), "--steps", "3"]  # an integer is its decimal text
    # config.yaml of the run repeats it from anywhere: parse(to_dict(exp)) finds the same program.
    again = model.parse(model.to_dict(exp), str(tmp_path / "elsewhere" / "config.yaml"))
    assert again.jobs[0].workload["command"] == words


@pytest.mark.parametrize("source, torch", [
    ("import torch\n", True), ("import torch.distributed as dist\n", True),
    ("def main():\n    from torch import nn\n", True), ("import torchvision_like\n", False),
    ("from .torch import x\n", False), ("print('no torch')\n", False), ("def broken(:\n", False)])
def test_torch_programs_are_recognized_from_their_source(tmp_path, source, torch):
    (tmp_path / "p.py").write_text(source)
    _, spec = program.parse_program({"command": ["python", str(tmp_path / "p.py")]}, KEY, None)
    assert spec.imports_torch is torch


def test_torch_is_read_from_a_module_and_from_code(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('importing the package would run this')\n")
    (pkg / "train.py").write_text("import torch\n")
    path = str(tmp_path / "e.yaml")
    _, spec = program.parse_program({"command": ["python", "-m", "mypkg.train"]}, KEY, path)
    assert spec.imports_torch
    _, spec = program.parse_program({"command": ["python", "-c", "import torch; print(1)"]}, KEY, path)
    assert spec.imports_torch
    _, spec = program.parse_program({"command": ["python", "-m", "no.such.module"]}, KEY, path)
    assert not spec.imports_torch  # dtnet cannot know; Python will say so when it runs


def test_a_torch_program_without_torch_says_how_to_install_it(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(InputError) as e:
        program.parse_program({"command": ["python", "-c", "import torch"]}, KEY, "x.yaml")
    msg = str(e.value)
    assert "\n" not in msg and "x.yaml: jobs[0].workload.command" in msg
    assert "pip install torch==2.13.0" in msg
    # A program that does not import torch does not need it.
    program.parse_program({"command": ["python", "-c", "print(1)"]}, KEY, "x.yaml")


@pytest.mark.parametrize("workload, key, expected", [
    ({"command": "python train.py"}, "command", "a non-empty list of words"),
    ({"command": ["python", "-c", "a\x00b"]}, "command[2]", "printable characters only"),
    ({"command": ["python", True]}, "command[1]", "a string"),
    ({"command": ["python", 1.5]}, "command[1]", "a string"),
    ({"command": [""]}, "command[0]", "a program name or path"),
    ({"command": ["./not-here"]}, "command[0]", "an executable file"),
    ({"command": ["python", "-m"]}, "command[1]", "a module after -m"),
    ({"command": ["python", "-c", "1"], "env": {"1X": "a"}}, "env.1X", "an environment variable name"),
    ({"command": ["python", "-c", "1"], "env": {"DTNET_JOB": "a"}}, "env.DTNET_JOB", "a variable dtnet does not set itself"),
    ({"command": ["python", "-c", "1"], "env": {"X": ["a"]}}, "env.X", "a string value"),
    ({"command": ["python", "-c", "1"], "profile": "yes"}, "profile", "true or false"),
    ({"command": ["python", "-c", "1"]*200}, "command", "at most 256 words"),
])
def test_bad_commands_name_the_word(workload, key, expected):
    with pytest.raises(InputError) as e:
        program.parse_program(workload, KEY, "x.yaml")
    assert f"{KEY}.{key}: expected {expected}" in str(e.value)


def test_an_executable_is_checked_and_the_environment_passed(tmp_path):
    exe = tmp_path / "run.sh"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    _, spec = program.parse_program({"command": ["./run.sh", "a b; rm -rf /"], "env": {"SEED": 7}}, KEY,
                                    str(tmp_path / "e.yaml"))
    assert spec.argv == (str(exe), "a b; rm -rf /")  # one word: no shell ever sees it
    assert spec.env == (("SEED", "7"),) and not spec.imports_torch
    (tmp_path / "plain").write_text("")
    with pytest.raises(InputError, match="an executable file"):
        program.parse_program({"command": ["./plain"]}, KEY, str(tmp_path / "e.yaml"))


def test_every_host_is_a_node_of_one_process_without_servers():
    fab = leaf_spine(2, 1, 2)
    spec = program.ProgramSpec(("python", "t.py"), (("SEED", "1"),), profile=True, master_port=29511)
    plans = program.rank_plans(spec, "j", ["h2", "h0", "h3"], fab, 0.0)
    assert [p["env"]["RANK"] for p in plans] == ["0", "1", "2"]
    for p in plans:
        env = p["env"]
        assert env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == fab.node("h2")["ip"]
        assert env["MASTER_PORT"] == "29511" and env["SEED"] == "1"
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == ("0", "1", "3")
        assert p["cwd"].startswith("programs/j/") and p["profile_dir"].startswith(p["cwd"])
        assert not os.path.isabs(p["stdout"]) and not os.path.isabs(p["stderr"])


def test_a_server_of_gpus_is_one_torchrun_node():
    fab = rail_optimized(2, 4, 2)
    hosts = ["h0", "h1", "h4", "h5", "h6"]  # two GPUs of server 0, three of server 1
    plans = program.rank_plans(program.ProgramSpec(("python",)), "j", hosts, fab, 0.0)
    got = [(p["env"]["LOCAL_RANK"], p["env"]["LOCAL_WORLD_SIZE"], p["env"]["GROUP_RANK"]) for p in plans]
    assert got == [("0", "2", "0"), ("1", "2", "0"), ("0", "3", "1"), ("1", "3", "1"), ("2", "3", "1")]
    assert {p["env"]["GROUP_WORLD_SIZE"] for p in plans} == {"2"}


def test_a_program_job_is_planned_without_agents(tmp_path):
    exp = _exp(tmp_path, {"command": ["python", "-c", "print(1)"]})
    (jp,) = build_plans(exp, exp.fabric())
    assert jp.trace is None and jp.ranks == [] and len(jp.program) == 4


def test_marker_lines_parse_and_others_are_left_alone():
    assert program.parse_marker("loss 0.25\n") is None
    assert program.parse_marker('{"loss": 0.25}') is None
    assert program.parse_marker('{"dtnet": "iteration", "iteration": 2, "time_s": 0.5, "end": 10.0}') == \
        {"kind": "iteration", "end": 10.0, "iteration": 2, "time_s": 0.5}
    c = program.parse_marker('{"dtnet": "collective", "op": "all_reduce", "size_bytes": 4096, "start": 1.0, '
                             '"end": 2.0}')
    assert (c["op"], c["size_bytes"], c["start"], c["id"]) == ("all_reduce", 4096, 1.0, None)
    for bad in ('{"dtnet": "iteration", "time_s": 1}', '{"dtnet": "iteration", "iteration": 1, "time_s": -1}',
                '{"dtnet": "epoch", "iteration": 1}', '{"dtnet": "collective", "op": "x y", "size_bytes": 1, '
                '"time_s": 1}', '{"dtnet": "collective", "op": "all_reduce", "size_bytes": 1}',
                '{"dtnet": "collective", "op": "all_reduce", "size_bytes": 1.5, "time_s": 1}', '{"dtnet": tru'):
        with pytest.raises(ValueError):
            program.parse_marker(bad)


def test_the_helper_prints_what_dtnet_reads(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr(helper, "_seq", {})
    with helper.iteration(4):
        with helper.collective("all_reduce", 1 << 20, iteration=4):
            pass
        helper.report_collective("all_gather", 512, 5.0, 6.0, group="tp", ranks=2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    m = [program.parse_marker(ln) for ln in lines]
    assert [x["kind"] for x in m] == ["collective", "collective", "iteration"]
    assert (m[0]["op"], m[0]["size_bytes"], m[0]["iteration"], m[0]["id"]) == ("all_reduce", 1 << 20, 4, "world#0")
    assert (m[1]["group"], m[1]["ranks"], m[1]["id"]) == ("tp", 2, "tp#0")
    assert m[2]["iteration"] == 4 and m[2]["time_s"] >= 0 and m[2]["end"] >= m[0]["end"]


def test_the_helper_exits_with_the_status_and_its_output_flushed(tmp_path):
    """program.exit skips finalization (atexit handlers do not run) but loses no output."""
    import subprocess
    import sys
    code = ("import atexit, sys\nfrom dtnet import program\natexit.register(lambda: print('finalized'))\n"
            "sys.stdout.write('partial line')\nsys.stderr.write('err')\nprogram.exit(3)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": root})
    assert (r.returncode, r.stdout, r.stderr) == (3, "partial line", "err")


def test_markers_become_real_cluster_figures():
    """4 ranks, two iterations of a 1 MiB (emulated) all-reduce at 40x dilation: each
    collective runs from the first rank's start to the last rank's end."""
    dil, sb = 40.0, 1e-3
    events = []
    for it in range(2):
        base = 100.0 + it * 1.0
        for r in range(4):
            lines = [{"dtnet": "collective", "op": "all_reduce", "size_bytes": 1 << 20, "start": base + 0.01 * r,
                      "end": base + 0.8, "iteration": it},
                     {"dtnet": "iteration", "iteration": it, "time_s": 0.9, "end": base + 0.85 + 0.01 * r}]
            for i, ln in enumerate(lines):
                events.append(program.marker_event(program.parse_marker(json.dumps(ln)), "j", r, 4, sb, 0.0, it))
    res = job_results("j", events, dil)
    (c,) = res["collectives"]
    assert c["size_bytes"] == round((1 << 20) / sb) and c["count"] == 2 and c["ranks"] == 4
    assert c["cct_s"] == pytest.approx(0.8 / dil)
    assert c["busbw_gbps"] == pytest.approx((1 << 20) / sb * 8 / (0.8 / dil) / 1e9 * 1.5)
    # As for replays: an iteration ends when its last rank ends; the second counts from the first's end.
    assert res["iterations"] == 2
    assert res["iteration_time_s"]["all"][1] == pytest.approx(1.0 / dil)
