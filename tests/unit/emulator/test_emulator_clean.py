"""`dtnet clean` against a state.json it cannot trust: forged PIDs and start times, another
live run's tag, a lease of another folder. No root: the leases live in a temp folder and the
removal of bridges and links is recorded, not run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from emulator.testbed import clean, runstate
from emulator.testbed.process import start_time


@pytest.fixture
def leases(tmp_path, monkeypatch):
    d = tmp_path / "leases"
    d.mkdir()
    monkeypatch.setattr(runstate, "LEASE_DIR", str(d))
    removed = []
    monkeypatch.setattr(runstate, "remove_leftovers", lambda tag: removed.append(tag) or
                        {"bridges": [], "links": [], "netns": []})
    return d, removed


@pytest.fixture
def decoy():
    """A live process whose command line looks like a run's controller: not the run's own."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "controller.run"])
    yield p
    p.kill()
    p.wait(10)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(10)
    return p.pid


def forge(run_dir, **state) -> None:
    run_dir.mkdir(exist_ok=True)
    data = {"tag": "xa", "owner_pid": dead_pid(), "owner_start": 1.0, "pids": {}, "starts": {}, "status": "running"}
    (run_dir / runstate.STATE_NAME).write_text(json.dumps({**data, **state}))


def test_a_process_is_killed_only_when_its_pid_and_start_time_match(tmp_path, leases, decoy):
    forge(tmp_path / "run", pids={"controller": decoy.pid}, starts={"controller": start_time(decoy.pid) - 5.0})
    logs = []
    clean.clean_run(str(tmp_path / "run"), log=logs.append)
    assert decoy.poll() is None, logs  # a PID reused by another process: left alone
    assert leases[1] == ["xa"]  # no lease held the tag: its leftovers go, under a lease of ours
    assert not os.listdir(leases[0])  # and that lease is released again
    # The recorded process itself (same PID, same start time) is killed.
    forge(tmp_path / "run", pids={"controller": decoy.pid}, starts={"controller": start_time(decoy.pid)})
    assert clean.clean_run(str(tmp_path / "run"), log=logs.append) == 1
    # Ended by the time clean returns (SIGKILL is asynchronous): only its parent's reaping is left.
    import psutil
    assert psutil.Process(decoy.pid).status() == psutil.STATUS_ZOMBIE
    assert decoy.wait(10) == -9 and any(f"killed controller (pid {decoy.pid})" in m for m in logs)


def test_a_pid_without_a_recorded_start_time_is_not_killed(tmp_path, leases, decoy):
    forge(tmp_path / "run", pids={"controller": decoy.pid}, starts={})
    clean.clean_run(str(tmp_path / "run"), log=lambda *_: None)
    assert decoy.poll() is None


def test_another_live_runs_tag_is_refused_with_one_line(tmp_path, leases, decoy):
    d, removed = leases
    lease = {"pid": decoy.pid, "start": start_time(decoy.pid), "run_dir": str(tmp_path / "other")}
    (d / "tag-xa").write_text(json.dumps(lease))
    forge(tmp_path / "run", pids={"controller": decoy.pid}, starts={"controller": start_time(decoy.pid)})
    logs = []
    assert clean.clean_run(str(tmp_path / "run"), log=logs.append) == 0
    assert removed == [] and decoy.poll() is None
    assert json.loads((d / "tag-xa").read_text()) == lease
    assert len(logs) == 1 and "leased by a live run" in logs[0] and str(decoy.pid) in logs[0]


def test_a_dead_lease_of_another_folder_is_not_this_runs(tmp_path, leases):
    d, removed = leases
    (d / "tag-xa").write_text(json.dumps({"pid": dead_pid(), "run_dir": str(tmp_path / "other")}))
    forge(tmp_path / "run")
    logs = []
    assert clean.clean_run(str(tmp_path / "run"), log=logs.append) == 0
    assert removed == [] and "another run's folder" in logs[0] and (d / "tag-xa").exists()


def test_a_dead_runs_own_lease_is_cleaned_and_freed(tmp_path, leases):
    d, removed = leases
    (d / "tag-xa").write_text(json.dumps({"pid": dead_pid(), "run_dir": str(tmp_path / "run")}))
    forge(tmp_path / "run")
    clean.clean_run(str(tmp_path / "run"), log=lambda *_: None)
    assert removed == ["xa"] and not (d / "tag-xa").exists()
    assert json.loads((tmp_path / "run" / runstate.STATE_NAME).read_text())["status"] == "cleaned"


def test_a_live_owner_is_told_from_a_reused_pid_by_its_start_time(tmp_path, leases, decoy):
    forge(tmp_path / "run", owner_pid=decoy.pid, owner_start=start_time(decoy.pid))
    logs = []
    clean.clean_run(str(tmp_path / "run"), log=logs.append)
    assert leases[1] == [] and "still running" in logs[0]
    forge(tmp_path / "run", owner_pid=decoy.pid, owner_start=start_time(decoy.pid) - 60)
    clean.clean_run(str(tmp_path / "run"), log=logs.append)
    assert leases[1] == ["xa"]  # the owner died; its PID is someone else's now


def test_the_run_records_each_process_with_its_start_time(tmp_path, decoy):
    st = runstate.RunState(str(tmp_path), "xa")
    st.add_pid("controller", decoy.pid)
    st.set(host_pids={"h0": decoy.pid})
    data = json.loads((tmp_path / runstate.STATE_NAME).read_text())
    assert data["owner_start"] == start_time(os.getpid())
    assert data["starts"]["controller"] == data["host_starts"]["h0"] == start_time(decoy.pid)
