"""The plots drawn by a forked child while the parent writes the rest (experiment.outputs.parallel):
the same files as one process writes, the child's failure the run's, no process left behind."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from experiment import model, pipeline
from experiment.engine import Interrupted, RunFailure
from experiment.outputs import parallel
from experiment.outputs.parallel import WriterFailed, beside
from tests.unit.runfiles import contents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PARENT = os.getpid()


@pytest.fixture
def forks(monkeypatch):
    """The pipeline forks here whatever the CPUs and threads (an earlier test may leave a thread
    running, which makes can_fork() say no); skipped where there is no fork."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    monkeypatch.setattr(parallel, "can_fork", lambda: True)


def _die(*_):
    """The child's death; never the test process's (a part run in place raises instead)."""
    if os.getpid() == PARENT:
        raise AssertionError("the part ran in the test's own process")
    os.kill(os.getpid(), signal.SIGKILL)
# Two jobs on a fat-tree: every output, the heatmap with its collectives' strip included.
EXP = {"name": "two-jobs", "engine": "flow", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 100},
       "jobs": [{"name": "a", "hosts": {"count": 8},
                 "workload": {"collective": "all_reduce", "size_bytes": 1 << 24, "iterations": 3,
                              "compute_ms": 1}},
                {"name": "b", "hosts": {"count": 8},
                 "workload": {"collective": "all_to_all", "size_bytes": 1 << 22, "iterations": 2}}]}


def _gone(pid: int) -> bool:
    """pid is no process of ours: reaped, not a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.usefixtures("forks")
def test_the_childs_exception_is_the_callers_failure_in_one_line_and_its_log_comes_back():
    lines, pids = [], []

    def part(log):
        log("first")
        log("second")
        pids.append(os.getpid())
        raise ValueError("bad\nvalue")

    with pytest.raises(WriterFailed) as e:
        with beside(part, "the plots", lines.append):
            lines.append("parent")
    msg = str(e.value)
    assert "\n" not in msg and "ValueError: bad\\nvalue" in msg and "the plots" in msg
    assert isinstance(e.value, RunFailure)
    assert lines == ["parent", "first", "second"]
    assert pids == []  # part ran in another process
    pid = int(msg.split("(pid ")[1].split(")")[0])
    assert pid != os.getpid() and _gone(pid)


@pytest.mark.usefixtures("forks")
def test_a_child_killed_by_a_signal_fails_the_caller():
    with pytest.raises(WriterFailed) as e:
        with beside(_die, "plots/", print):
            pass
    assert "killed by SIGKILL" in str(e.value)


@pytest.mark.usefixtures("forks")
def test_an_exception_in_the_parent_ends_and_reaps_the_child(tmp_path):
    r, w = os.pipe()  # the child blocks on r until it is ended; it tells its pid through tmp_path

    def part(log):
        (tmp_path / "pid").write_text(str(os.getpid()))
        os.read(r, 1)

    with pytest.raises(Interrupted):
        with beside(part, "plots/", print):
            while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
                os.sched_yield()
            raise Interrupted("SIGTERM")
    os.close(r)
    os.close(w)
    assert _gone(int((tmp_path / "pid").read_text()))


def test_without_fork_the_part_runs_here_after_the_block():
    order = []
    with beside(lambda log: order.append(("part", os.getpid())), "plots/", print, fork=False):
        order.append(("block", os.getpid()))
    assert order == [("block", os.getpid()), ("part", os.getpid())]


def test_a_fork_that_fails_leaves_the_part_to_this_process(monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    order = []
    with beside(lambda log: order.append(("part", os.getpid())), "plots/", print, fork=True):
        order.append(("block", os.getpid()))
    assert order == [("block", os.getpid()), ("part", os.getpid())]


def test_one_allowed_cpu_or_another_thread_means_no_fork(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not parallel.can_fork()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert parallel.can_fork() == (hasattr(os, "fork") and threading.active_count() == 1)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not parallel.can_fork()
    finally:
        stop.set()
        t.join()


@pytest.mark.usefixtures("forks")
def test_forked_plots_give_the_files_one_process_writes(tmp_path, monkeypatch):
    exp = model.parse(EXP, "two-jobs.yaml")
    monkeypatch.setattr(pipeline, "FORK_MIN_EVENTS", 0)  # a small run, forked all the same
    drawn = tmp_path / "drawn-by"
    real = pipeline.plots_of

    def plots_of(*a, **kw):
        part = real(*a, **kw)

        def draw(log):
            drawn.write_text(str(os.getpid()))
            part(log)
        return draw

    monkeypatch.setattr(pipeline, "plots_of", plots_of)
    pipeline.runner("flow")(exp, str(tmp_path / "forked"), log=lambda *_: None)
    assert int(drawn.read_text()) != os.getpid()
    monkeypatch.setattr(pipeline, "FORK_MIN_EVENTS", 10 ** 9)  # a small run draws its plots itself
    pipeline.runner("flow")(exp, str(tmp_path / "small"), log=lambda *_: None)
    assert int(drawn.read_text()) == os.getpid()
    monkeypatch.setattr(parallel, "can_fork", lambda: False)
    pipeline.runner("flow")(exp, str(tmp_path / "serial"), log=lambda *_: None)
    assert int(drawn.read_text()) == os.getpid()
    forked, serial = contents(tmp_path / "forked"), contents(tmp_path / "serial")
    assert contents(tmp_path / "small") == serial
    assert {"links.csv", "trace.json", "plots/link_heatmap.png", "plots/cct_by_collective.png",
            "plots/iteration_time.png"} <= set(forked)
    assert forked == serial


@pytest.mark.usefixtures("forks")
def test_a_failed_plot_child_fails_the_run_and_summary_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "FORK_MIN_EVENTS", 0)
    monkeypatch.setattr(pipeline, "plots_of", lambda *a, **kw: _die)
    with pytest.raises(RunFailure) as e:
        pipeline.runner("flow")(model.parse(EXP, "two-jobs.yaml"), str(tmp_path), log=lambda *_: None)
    assert "killed by SIGKILL" in str(e.value)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "incomplete" and summary["error"] == str(e.value)
    assert (tmp_path / "trace.json").exists() and (tmp_path / "links.csv").exists()  # the parent's part
    assert _gone(int(str(e.value).split("(pid ")[1].split(")")[0]))
    # A run left incomplete so runs again in place.
    monkeypatch.undo()
    assert pipeline.runner("flow")(model.parse(EXP, "two-jobs.yaml"), str(tmp_path),
                                   log=lambda *_: None)["status"] == "complete"


SIGTERMED = textwrap.dedent("""
    import os, signal, sys
    from experiment.engine import Interrupted
    from experiment.outputs.parallel import beside

    def on_signal(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    r, w = os.pipe()

    def part(log):
        os.write(1, f"child {os.getpid()}\\n".encode())  # one write: the parent's line never cuts into it
        os.read(r, 1)

    try:
        with beside(part, "plots/", print, fork=True):
            os.write(1, f"parent {os.getpid()}\\n".encode())
            os.read(r, 1)
    except Interrupted as e:
        print("interrupted by", e, flush=True)
        sys.exit(130)
""")


@pytest.mark.usefixtures("forks")
def test_sigterm_to_the_parent_ends_the_child_and_leaves_no_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    pids = {}
    while len(pids) < 2:
        who, pid = proc.stdout.readline().split()
        pids[who] = int(pid)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 130
    assert rest == "interrupted by SIGTERM\n"
    with pytest.raises(ProcessLookupError):  # reaped by its parent before it left
        os.kill(pids["child"], 0)


def _write_pid(path, log):  # a picklable part: where it ran
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    log("drawn")


@pytest.mark.usefixtures("forks")
def test_a_warm_child_imports_first_then_runs_the_part_it_is_sent_and_reports_back(tmp_path):
    import functools

    warm = parallel.Warm(("json",), "plots/")
    pid = warm.child.pid
    assert warm.send(functools.partial(_write_pid, str(tmp_path / "pid")))
    lines = []
    warm.wait(lines.append)
    assert int((tmp_path / "pid").read_text()) == pid != os.getpid()
    assert lines == ["drawn"] and _gone(pid)
    warm.close()  # after its end: nothing is signalled again (its pid may be another process's by now)


@pytest.mark.usefixtures("forks")
def test_a_warm_child_not_used_or_sent_too_much_is_ended_and_reaped():
    warm = parallel.Warm(("json",), "plots/")
    warm.close()
    assert _gone(warm.child.pid)
    warm = parallel.Warm(("json",), "plots/")
    assert not warm.send(b"x" * (warm.capacity + 1))  # would block until the child reads: not sent
    assert _gone(warm.child.pid)
    warm = parallel.Warm(("json",), "plots/")
    assert not warm.send(lambda log: None)  # not picklable: the caller forks as before
    assert _gone(warm.child.pid)


def _record_pid(real, folder):
    """A PlotJob.__call__ that notes the process it ran in (and the heatmap's, separately)."""
    from experiment.outputs import plots

    def call(self, log):
        (folder / "job").write_text(str(os.getpid()))
        heatmap = plots.link_heatmap

        def link_heatmap(*a, **kw):
            (folder / "heatmap").write_text(str(os.getpid()))
            return heatmap(*a, **kw)

        plots.link_heatmap = link_heatmap
        try:
            return real(self, log)
        finally:
            plots.link_heatmap = heatmap
    return call


@pytest.mark.usefixtures("forks")
def test_a_warm_child_draws_a_small_runs_plots_the_heatmap_in_a_child_of_its_own(tmp_path, monkeypatch):
    from experiment.outputs.write import PlotJob

    exp = model.parse(EXP, "two-jobs.yaml")
    pipeline.runner("flow")(exp, str(tmp_path / "serial"), log=lambda *_: None)
    monkeypatch.setattr(PlotJob, "__call__", _record_pid(PlotJob.__call__, tmp_path))
    monkeypatch.setattr(parallel, "_warm", parallel.Warm(parallel.PLOT_MODULES, "plots/"))
    warm_pid = parallel._warm.child.pid
    pipeline.runner("flow")(exp, str(tmp_path / "warm"), log=lambda *_: None)
    assert parallel._warm is None and _gone(warm_pid)
    job, heatmap = int((tmp_path / "job").read_text()), int((tmp_path / "heatmap").read_text())
    assert job == warm_pid and heatmap not in (job, os.getpid())
    assert contents(tmp_path / "warm") == contents(tmp_path / "serial")  # the same bytes


@pytest.mark.usefixtures("forks")
def test_a_warm_child_is_ended_at_once_by_a_run_that_will_not_use_it(tmp_path, monkeypatch):
    exp = model.parse({**EXP, "outputs": {"plots": False}}, "two-jobs.yaml")
    monkeypatch.setattr(parallel, "_warm", parallel.Warm(parallel.PLOT_MODULES, "plots/"))
    warm_pid = parallel._warm.child.pid
    pipeline.runner("flow")(exp, str(tmp_path / "no-plots"), log=lambda *_: None)
    assert parallel._warm is None and _gone(warm_pid) and not (tmp_path / "no-plots" / "plots").exists()


@pytest.mark.usefixtures("forks")
def test_dtnet_run_ends_its_warm_child_when_the_input_is_bad(tmp_path, monkeypatch, capsys):
    from dtnet import cli

    started = []

    def warm_plots():  # as dtnet run starts it, matplotlib in this process or not
        parallel._warm = parallel.Warm(("json",), "plots/")
        started.append(parallel._warm.child.pid)

    monkeypatch.setattr(parallel, "warm_plots", warm_plots)
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**EXP, "jobs": []}))
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert started and parallel._warm is None and _gone(started[0])
