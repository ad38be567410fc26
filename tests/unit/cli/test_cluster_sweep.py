"""Sweeps on a local Dask cluster of worker processes (127.0.0.1 only), flow-engine points:
the same folders as a local sweep, a worker killed mid-point, SIGINT, addresses that do not
answer. Needs the [cluster] extra (make setup installs it)."""
from __future__ import annotations

import csv
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import yaml

distributed = pytest.importorskip("distributed")

from dtnet.cli import main  # noqa: E402
from dtnet.cluster import task  # noqa: E402
from dtnet.cluster.client import Executor  # noqa: E402
from experiment import model, sweep  # noqa: E402
from tests.unit.runfiles import contents  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

EIGHT = {  # 8 flow points of about a second each
    "name": "eight", "engine": "flow", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
    "controller": {"routing": "ecmp"},
    "jobs": [{"name": "j0", "hosts": {"count": 8, "placement": "spread"},
              "workload": {"collective": "all_reduce", "algorithm": "ring", "size_bytes": 536870912,
                           "iterations": 3}}],
    "sweep": {"grid": {"controller.routing": ["ecmp", "shortest"],
                       "jobs.0.workload.algorithm": ["ring", "halving-doubling"], "flow.ecmp_seed": [0, 1]}},
}


def write(tmp_path, data, name="sweep.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def local_eight(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    path = write(tmp, EIGHT)
    assert main(["run", path, "--out", str(tmp / "out")]) == 0
    return path, tmp / "out"


@pytest.fixture
def cluster():
    """Two worker processes on 127.0.0.1, one point slot each; a dead worker's point comes back to
    the client (allowed-failures 0), as with `dtnet scheduler`."""
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                                     silence_logs=50) as c, \
            distributed.Client(c, set_as_default=False) as client:
        yield c, client


def test_eight_flow_points_on_two_workers_write_what_a_local_sweep_writes(local_eight, tmp_path, capsys):
    path, local_out = local_eight
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["run", path, "--out", str(out), "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    ran = re.findall(r"running \(point \d of 8\) on (worker \d+) \(", printed)
    assert len(ran) == 8 and set(ran) == {"worker 0", "worker 1"}, printed  # both workers ran points
    assert contents(out) == contents(local_out)
    table = printed[printed.index("\npoint "):]  # the table, made here from the points that came back
    assert len(re.findall(r"^\S+ +complete ", table, re.M)) == 8, table
    # Resume: every point is complete, none is sent.
    assert main(["run", path, "--out", str(out), "--workers", "2"]) == 0
    again = capsys.readouterr().out
    assert again.count("skipped, complete in an earlier run") == 8 and "running (point" not in again


def _runners(pid: int) -> list[psutil.Process]:
    return [c for c in psutil.Process(pid).children(recursive=True) if "dtnet.cluster.task" in " ".join(c.cmdline())]


def _gone(procs, timeout_s=20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


class Killer:
    """A log that kills, with SIGKILL, the worker that starts running `slug`, `times` times."""

    def __init__(self, cluster, slug: str, times: int):
        self.cluster, self.slug, self.times = cluster, slug, times
        self.lines, self.killed, self.runners = [], [], []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        m = re.search(rf" {re.escape(self.slug)}: running \(point \d+ of \d+\) on worker (\d+) ", line)
        if m and len(self.killed) < self.times:
            pid = self.cluster.workers[int(m.group(1))].process.pid
            self.runners += _runners(pid)
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)


def test_a_worker_killed_mid_point_has_its_point_run_again_and_the_sweep_completes(local_eight, cluster, tmp_path):
    c, client = cluster
    path, local_out = local_eight
    exp = model.load(path)
    points = sweep.expand(exp)
    victim = points[2].slug
    log = Killer(c, victim, times=1)
    done = sweep.run(exp, str(tmp_path / "out"), None, points, log=log, execute=Executor(client, log=log))
    text = "\n".join(log.lines)
    assert len(log.killed) == 1
    assert f"{victim}: lost with worker" in text and "it died mid-point" in text, text
    assert done["complete"] == 8 and done["failed"] == [], text
    assert contents(tmp_path / "out") == {k: v for k, v in contents(local_out).items()}
    assert _gone(log.runners), "the killed worker's point process outlived it"


def test_a_point_whose_worker_dies_twice_is_failed_with_the_reason_and_the_rest_complete(cluster, tmp_path):
    c, client = cluster
    data = {**EIGHT, "sweep": {"grid": {"flow.ecmp_seed": [0, 1, 2]}}}
    exp = model.load(write(tmp_path, data))
    points = sweep.expand(exp)
    log = Killer(c, points[0].slug, times=2)
    done = sweep.run(exp, str(tmp_path / "out"), None, points, log=log, execute=Executor(client, log=log))
    assert len(log.killed) == 2
    assert done["failed"] == [points[0].slug] and done["complete"] == 2
    rows = {r["point"]: r for r in csv.DictReader(open(tmp_path / "out" / "sweep.csv"))}
    assert rows[points[0].slug]["status"] == "failed"
    assert "lost with its worker 2 time(s)" in rows[points[0].slug]["error"]
    assert "it died mid-point" in rows[points[0].slug]["error"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_address_that_does_not_answer_is_exit_2_with_one_line_and_fast(tmp_path, capsys):
    path = write(tmp_path, EIGHT)
    t = time.monotonic()
    assert main(["run", path, "--out", str(tmp_path / "o"), "--cluster", f"127.0.0.1:{_free_port()}",
                 "--connect-timeout-s", "1"]) == 2
    took = time.monotonic() - t
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--cluster: expected a Dask scheduler answering at tcp://127.0.0.1:" in err, err
    assert "no answer within 1 s" in err and took < 15, (err, took)
    assert not (tmp_path / "o" / "points").exists() or not os.listdir(tmp_path / "o" / "points")


@pytest.mark.parametrize("argv, key, expected", [
    (["--cluster", "tcp://127.0.0.1:99999"], "--cluster", "a scheduler address"),
    (["--cluster", "; rm -rf /"], "--cluster", "a scheduler address"),
    (["--workers", "0"], "--workers", "a number of worker processes >= 1"),
    (["--workers", "2", "--cluster", "127.0.0.1:8786"], "--workers", "either --cluster"),
])
def test_bad_cluster_flags_are_one_line_errors(tmp_path, capsys, argv, key, expected):
    assert main(["run", write(tmp_path, EIGHT), "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{key}: expected {expected}" in err, err


def test_a_single_run_refuses_the_cluster_flags(tmp_path, capsys):
    one = {k: v for k, v in EIGHT.items() if k != "sweep"}
    assert main(["run", write(tmp_path, one), "--out", str(tmp_path / "o"), "--workers", "2"]) == 2
    assert "an experiment with a sweep: section" in capsys.readouterr().err


def test_without_dask_the_flags_name_the_install_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    for flag in (["--workers", "2"], ["--cluster", "127.0.0.1:8786"]):
        assert main(["run", write(tmp_path, EIGHT), "--out", str(tmp_path / "o"), *flag]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "pip install 'dtnet[cluster]'" in err and err.startswith(f"dtnet: {flag[0]}:"), err
    assert main(["worker", "127.0.0.1:8786"]) == 2
    assert "dtnet worker: expected Dask's distributed scheduler installed" in capsys.readouterr().err


def test_dtnet_worker_refuses_an_address_that_does_not_answer(capsys):
    t = time.monotonic()
    assert main(["worker", f"127.0.0.1:{_free_port()}", "--connect-timeout-s", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "ADDRESS: expected a Dask scheduler answering" in err and time.monotonic() - t < 15


LONG = {**EIGHT, "flow": {"collective_model": "detailed"},
        "jobs": [{"name": "j0", "hosts": "all", "workload": {"collective": "all_to_all", "algorithm": "direct",
                                                              "size_bytes": 536870912, "iterations": 40}}],
        "sweep": {"grid": {"flow.ecmp_seed": [0, 1, 2, 3]}}}


def _start(args, stderr=subprocess.STDOUT, **kw):
    return subprocess.Popen([sys.executable, "-m", "dtnet", *args], stdout=subprocess.PIPE, stderr=stderr,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)


def _wait_lines(p, pattern: str, count: int, lines: list, timeout_s=120.0) -> None:
    deadline = time.monotonic() + timeout_s
    for line in p.stdout:  # a condition, not a sleep
        lines.append(line)
        if sum(pattern in ln for ln in lines) >= count:
            return
        assert time.monotonic() < deadline, "".join(lines)
    raise AssertionError("ended first: " + "".join(lines))


def test_sigint_stops_the_points_and_leaves_no_worker_busy(cluster, tmp_path):
    c, client = cluster
    out = tmp_path / "out"
    p = _start(["run", write(tmp_path, LONG), "--out", str(out), "--cluster", c.scheduler_address])
    lines: list = []
    scratch = client.run(lambda dask_worker: dask_worker.local_directory)
    try:
        _wait_lines(p, "running (point", 2, lines)
        deadline = time.monotonic() + 60
        while sum(len(glob.glob(os.path.join(d, "dtnet-point-*", "run", "events.jsonl"))) for d in scratch.values()) < 2:
            assert time.monotonic() < deadline, "the points never began writing on their workers"
            time.sleep(0.1)  # polling a condition
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    text = "".join(lines) + rest
    assert p.returncode == 130, text
    # The moment it has exited, no worker runs a point of it, nor a task.
    busy = client.run(lambda dask_worker: dask_worker.state.executing_count)
    assert set(busy.values()) == {0}, busy
    assert set(client.run(task.cancel_sweep, "-").values()) == {0}
    rows = {r["point"]: r["status"] for r in csv.DictReader(open(out / "sweep.csv"))}
    assert sorted(rows.values()) == ["interrupted", "interrupted", "pending", "pending"], (rows, text)
    for slug, status in rows.items():  # what the stopped points wrote came back, as a local sweep keeps it
        assert (out / "points" / slug / "config.yaml").exists() == (status == "interrupted")


def test_ctrl_c_in_the_terminal_stops_a_local_cluster_sweep_cleanly(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: dtnet and its local workers."""
    p = _start(["run", write(tmp_path, LONG), "--out", str(tmp_path / "out"), "--workers", "2"],
               start_new_session=True)
    lines: list = []
    try:
        _wait_lines(p, "running (point", 2, lines)
        # A worker reports a point started as it launches the point's runner process, so
        # the second runner may appear a moment after its line: wait for it (seen once in CI).
        deadline = time.monotonic() + 60
        while True:
            tree = psutil.Process(p.pid).children(recursive=True)
            tasks = [t for t in tree if "dtnet.cluster.task" in " ".join(_cmdline(t))]
            if len(tasks) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(tasks) == 2, [_cmdline(t) for t in tree]
        os.killpg(p.pid, signal.SIGINT)
        rest = p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
    text = "".join(lines) + rest
    assert p.returncode == 130 and "Traceback" not in text and "died" not in text, text
    assert text.count(": interrupted on worker") == 2, text
    assert _gone(tree), [t.cmdline() for t in tree if t.is_running()]


def _cmdline(proc) -> list:
    try:
        return proc.cmdline()
    except psutil.Error:  # ended meanwhile
        return []


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def test_dtnet_scheduler_and_dtnet_worker_run_a_sweep_submitted_with_cluster(tmp_path):
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = _start(["scheduler", "--port", str(port)], stderr=subprocess.DEVNULL)  # Dask's log: not read
    worker = None
    try:
        first = sched.stdout.readline()
        assert first.startswith(f"dtnet scheduler: {address}"), first
        worker = _start(["worker", address, "--slots", "2", "--name", "lab1", "--no-emulator",
                         "--connect-timeout-s", "30"], stderr=subprocess.DEVNULL)
        said = worker.stdout.readline()
        assert said.startswith(f"dtnet worker lab1: joining {address}: 2 point slot(s)"), said
        assert "no emulator points (--no-emulator)" in said, said
        with distributed.Client(address, timeout=30, set_as_default=False) as client:
            client.wait_for_workers(1, timeout=60)
            assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 0
            (w,) = client.scheduler_info()["workers"].values()
            assert w["name"] == "lab1" and w["nthreads"] == 2 and not w.get("resources")
        data = {**EIGHT, "sweep": {"grid": {"flow.ecmp_seed": [0, 1]}}}
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, "-m", "dtnet", "run", write(tmp_path, data), "--out", str(out),
                            "--cluster", address], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count("on worker lab1 (") == 4, r.stdout  # 2 points: running, complete
        assert {x["status"] for x in csv.DictReader(open(out / "sweep.csv"))} == {"complete"}
        # Emulator points on a cluster with no worker offering the emulator: refused, one line.
        emu = {**data, "engine": "emulate", "scale": {"link": 2.5e-5, "bytes": 1e-3}}
        r = subprocess.run([sys.executable, "-m", "dtnet", "run", write(tmp_path, emu, "emu.yaml"), "--out",
                            str(tmp_path / "emu"), "--cluster", address], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
        assert r.returncode == 2 and "a worker offering the emulator" in r.stderr, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1
    finally:
        for p in (worker, sched):
            if p is not None:
                _stop(p)


def test_run_sweep_from_python_on_a_local_cluster(tmp_path):
    from dtnet.cluster import run_sweep

    exp = model.load(write(tmp_path, {**EIGHT, "sweep": {"grid": {"flow.ecmp_seed": [0, 1]}}}))
    lines: list = []
    done = run_sweep(exp, str(tmp_path / "out"), workers=1, log=lines.append)
    assert done["complete"] == 2 and done["failed"] == [], lines
    assert lines[0].startswith("dtnet: local cluster of 1 worker process(es) on 127.0.0.1")
    assert [r["status"] for r in done["rows"]] == ["complete", "complete"]


def test_a_worker_running_other_dtnet_code_is_refused_before_any_point(tmp_path, capsys):
    import shutil

    other = tmp_path / "other"
    for pkg in task.PACKAGES:  # a copy of the sources with one line changed
        shutil.copytree(os.path.join(ROOT, pkg), other / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "flowsim" / "__init__.py", "a") as f:
        f.write("# changed\n")
    port = _free_port()
    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=port, dashboard_address=None,
                                  silence_logs=50):
        w = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}",
                              "--nthreads", "1", "--no-dashboard"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=str(tmp_path),
                             env={**os.environ, "PYTHONPATH": str(other)})
        try:
            path = write(tmp_path, EIGHT)
            assert main(["run", path, "--out", str(tmp_path / "o"), "--cluster", f"127.0.0.1:{port}",
                         "--connect-timeout-s", "60"]) == 2
        finally:
            _stop(w)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "expected workers running the same dtnet code as here" in err, err
    assert not os.listdir(tmp_path / "o" / "points")
