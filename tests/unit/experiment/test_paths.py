"""Names that become paths are checked, and every file a run writes stays inside its folder,
also when a name got past the checks (the writers resolve and check, through one helper)."""
import ast
import json
import os
import pathlib
import shlex

import pytest

from badinput import InputError
from badinput.paths import check_name, inside
from badinput.schema import from_json
from emulator.run.runner import write_plan
from emulator.testbed import capture, clean, lifecycle, runstate
from experiment import model, sweep
from experiment.rankplan import RankPlan
from topologies import single_switch
from topologies.fabric import Fabric

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["a", "j0", "gpt_3d", "job-1.v2", "_x", "A" * 128])
def test_ordinary_names_pass(name):
    assert check_name(name, "jobs[0].name") == name


@pytest.mark.parametrize("name", ["", ".", "..", "../../etc/x", "a/b", "/abs", "-rf", ".hidden", "a b", "x\n",
                                  "a\\b", "$(id)", "A" * 129, None, 5])
def test_unsafe_names_are_refused_in_one_line(name):
    with pytest.raises(InputError) as e:
        check_name(name, "jobs[0].name", "e.yaml")
    msg = str(e.value)
    assert msg.startswith("e.yaml: jobs[0].name: expected a name of 1..128") and "\n" not in msg


def test_sweep_point_names_allow_their_own_characters_only():
    assert check_name("routing=ecmp,size_bytes=1e+06~3", "p", extra=sweep.SLUG_EXTRA)
    with pytest.raises(InputError):
        check_name("routing=ecmp", "p")  # '=' only where asked for
    with pytest.raises(InputError):
        check_name("routing/x=ecmp", "p", extra=sweep.SLUG_EXTRA)


def test_inside_refuses_dot_dot_absolute_and_symlinked_escapes(tmp_path):
    run = tmp_path / "run"
    (run / "plans").mkdir(parents=True)
    assert inside(str(run), "plans", "a", "rank0.json") == str(run / "plans" / "a" / "rank0.json")
    for parts in (("..", "x"), ("plans", "..", "..", "x"), ("/etc/passwd",)):
        with pytest.raises(InputError) as e:
            inside(str(run), *parts)
        assert "expected a path inside the run folder" in str(e.value)
    (run / "out").symlink_to(tmp_path)  # a link in the folder that leads out of it
    with pytest.raises(InputError):
        inside(str(run), "out", "x")
    assert inside(str(run)) == str(run)


def test_plan_files_of_an_unchecked_job_name_stay_inside(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    plan = RankPlan(job="a", rank=3, host="h0", port=0, dilation=1.0, slice_bytes=1024, start_offset_s=0.0, ops=(),
                    peers={}, inbound=0, transfer_events=False)
    path, err = write_plan(str(run), "a", plan)
    assert from_json(RankPlan, pathlib.Path(path).read_text()) == plan and err.endswith("plans/a/rank3.err")
    with pytest.raises(InputError):
        write_plan(str(run), "../../escaped", plan)
    (run / "plans" / "b").symlink_to(tmp_path)
    with pytest.raises(InputError):
        write_plan(str(run), "b", plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_sweep_point_folder_and_capture_file_stay_inside(tmp_path):
    with pytest.raises(InputError):
        sweep.point_dir(str(tmp_path), sweep.Point(0, (), "../../x", None))
    fab = Fabric("hand-made", {}, 400)  # node names no builder makes
    fab.add_switch("s0", "tor")
    fab.add_host("../../h")
    fab.add_link("../../h", "s0", 400, "host")
    with pytest.raises(InputError):
        capture.plan([("../../h", "s0")], fab, lambda n, p: "dev0", str(tmp_path), 10, 128)


def test_tc_batch_path_is_one_shell_word(tmp_path):
    """The batch file's path holds the user's --out; the host's shell must see it as one word."""
    run = tmp_path / "out; touch pwned"
    run.mkdir()
    tb = lifecycle.Testbed(single_switch(2), str(run), scale_link=2.5e-5)
    seen = []

    class Host:
        def cmd(self, line):
            seen.append(line)
            return "rc=0"

    tb.host = lambda name: Host()
    tb._tc_batch("host", "h0", ["qdisc show"])
    words = list(shlex.shlex(seen[0], posix=True, punctuation_chars=True))
    assert words[:4] == ["tc", "-batch", str(run / "tc-h0.batch"), ";"] and "touch" not in words, seen


def test_clean_leaves_a_state_file_with_a_forged_tag_alone(tmp_path, monkeypatch):
    """'' would match every bridge and link on the machine (names are matched by prefix)."""
    calls = []
    monkeypatch.setattr(runstate.subprocess, "run", lambda *a, **k: calls.append(a))
    logs = []
    for tag in ("", "x", "../../etc", None):
        (tmp_path / runstate.STATE_NAME).write_text(json.dumps({"tag": tag, "owner_pid": 0, "pids": {}}))
        assert clean.clean_run(str(tmp_path), logs.append) == 0
    assert calls == [] and all("expected a dtnet run tag" in m for m in logs) and len(logs) == 4
    with pytest.raises(ValueError):
        runstate.remove_leftovers("")


RUN_FOLDERS = {"out_dir", "run_dir", "self.run_dir", "folder", "cal_dir"}


def test_every_path_in_a_run_folder_is_named_through_inside():
    """The next writer cannot forget the check: os.path.join on a run folder is not used at all."""
    found = []
    for pkg in ("emulator", "experiment", "dtnet", "flowsim"):
        for f in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join" and node.args \
                        and ast.unparse(node.args[0]) in RUN_FOLDERS:
                    found.append(f"{f.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "use badinput.paths.inside: " + "; ".join(found)


def test_a_line_break_in_the_experiment_path_stays_in_the_comment_of_config_yaml(tmp_path):
    """config.yaml names its source in a comment line: a path with a line break must not end it."""
    data = {"name": "x", "topology": {"kind": "single-switch", "hosts": 2}, "scale": {"link": 2.5e-5, "bytes": 1e-3},
            "jobs": [{"workload": {"collective": "all_reduce", "size_bytes": 1024}}]}
    exp = model.parse(data, "odd\ncontroller: {routing: shortest}\n#.yaml")
    model.write_resolved(exp, str(tmp_path / "config.yaml"))
    again = model.load(str(tmp_path / "config.yaml"))
    assert again.routing == exp.routing == "ecmp"
