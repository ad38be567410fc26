"""emulator.run.programs with real processes and a fake testbed (no namespaces, no root):
output is read as it grows, a rank that fails is named with its last stderr line, and
stop() ends every process a rank made, by PID, also one it left behind."""
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from emulator.run.programs import Programs
from experiment import program
from topologies import single_switch


class FakeHost:
    def popen(self, argv, **kw):
        # As mnexec -d does: the program leads a session of its own.
        return subprocess.Popen(argv, start_new_session=True, **kw)


class FakeState:
    def __init__(self):
        self.pids = {}

    def add_pid(self, role, pid):
        self.pids[role] = pid


class FakeTestbed:
    def __init__(self, fabric):
        self.fabric, self.state = fabric, FakeState()

    def host(self, _name):
        return FakeHost()

    def intf(self, node, peer):
        return f"zz{node}-eth{self.fabric.port(node, peer)}"


class FakeJob:
    def __init__(self, plans):
        self.program = plans


def _programs(tmp_path, code: str, n=2):
    fab = single_switch(n)
    spec = program.ProgramSpec(("python", "-c", textwrap.dedent(code)))
    plans = program.rank_plans(spec, "j", fab.hosts, fab, 0.0)
    return Programs(FakeTestbed(fab), [FakeJob(plans)], str(tmp_path), 1e-3, time.time(), log=lambda *_: None)


def _until(progs, cond, timeout_s=20):
    events = []
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        events += progs.poll(time.time())
        time.sleep(0.05)
    return events


def test_markers_become_events_and_output_is_kept(tmp_path):
    progs = _programs(tmp_path, """
        import os, sys
        from dtnet import program
        print("starting rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])
        print("warning", file=sys.stderr)
        for it in range(3):
            program.report_collective("all_reduce", 4096, 1.0 + it, 1.5 + it, iteration=it)
            program.report_iteration(it, 0.5, end=1.5 + it)
        print('{"dtnet": "iteration"}')
    """)
    try:
        events = _until(progs, lambda: not progs.running())
        assert progs.verdict(time.time()) is None
    finally:
        progs.stop()
    exits = [e for e in events if e["kind"] == "exit"]
    assert sorted((e["rank"], e["exit_status"], e["ended_by"]) for e in exits) == [(0, 0, "itself"), (1, 0, "itself")]
    assert all(e["end"] >= e["start"] for e in exits)
    events = [e for e in events if e["kind"] != "exit"]
    kinds = sorted((e["rank"], e["kind"]) for e in events)
    assert kinds == sorted([(r, k) for r in (0, 1) for k in ("collective", "iteration") for _ in range(3)])
    coll = [e for e in events if e["kind"] == "collective"]
    assert {e["op_id"] for e in coll} == {"world#0", "world#1", "world#2"}
    assert all(e["size_bytes"] == 4096000 and e["size_bytes_emulated"] == 4096 and e["ranks"] == 2 for e in coll)
    res = progs.results()["j"]
    assert res["ok"] and [r["exit_status"] for r in res["ranks"]] == [0, 0]
    assert all(r["markers"] == 6 and r["bad_markers"] == 1 for r in res["ranks"])
    assert "iteration marker" in res["ranks"][0]["first_bad_marker"]
    assert (tmp_path / "programs/j/rank1.out").read_text().startswith("starting rank 1 of 2")
    assert (tmp_path / "programs/j/rank0.err").read_text() == "warning\n"
    assert os.path.isdir(tmp_path / "programs/j/rank0")  # its working directory


def test_a_failing_rank_is_named_with_its_last_error_line(tmp_path):
    progs = _programs(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            print("Traceback ...\\nValueError: rank 1 saw a wrong sum", file=sys.stderr)
            sys.exit(3)
        time.sleep(60)
    """)
    try:
        _until(progs, lambda: progs.verdict(time.time()) is not None)
        msg = progs.verdict(time.time())
    finally:
        progs.stop()
    assert msg.startswith("program j/rank 1 on h1 exited with status 3; last line of programs/j/rank1.err: "
                          "ValueError: rank 1 saw a wrong sum"), msg
    assert "ending 1 ranks still running" in msg
    ranks = progs.results()["j"]["ranks"]
    assert ranks[0]["ended_by"] == "dtnet" and ranks[1]["ended_by"] == "itself"
    assert not progs.results()["j"]["ok"]


def test_stop_ends_every_process_a_rank_made(tmp_path):
    marker = tmp_path / "pids"
    marker.mkdir()
    progs = _programs(tmp_path, f"""
        import os, subprocess, sys, time
        # a child it waits for, and a grandchild left behind by a child that exits at once
        kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        gone = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                                 "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                                 "open('{marker}/' + str(p.pid), 'w').close()"])
        gone.wait()
        open("{marker}/" + str(kid.pid), "w").close()
        signal_proof = __import__("signal")
        signal_proof.signal(signal_proof.SIGTERM, signal_proof.SIG_IGN)  # SIGKILL is needed for this one
        time.sleep(600)
    """)
    try:
        _until(progs, lambda: len(os.listdir(marker)) == 4)
        pids = [int(p) for p in os.listdir(marker)] + [rp.pid for rp in progs.ranks]
        assert all(psutil.pid_exists(p) for p in pids)
    finally:
        ended = progs.stop()
    assert sorted(e["rank"] for e in ended if e["kind"] == "exit") == [0, 1]
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive
    assert all(r["ended_by"] == "dtnet" for r in progs.results()["j"]["ranks"])


def test_delivered_bytes_integrates_the_switch_side_tx_over_the_window():
    from emulator.run.fidelity import Monitor, delivered_bytes

    mon = Monitor({}, interval_s=0.25)
    # 10 Mb/s link at half rate tx (to the host) for 8 samples = 2 s; rx ignored; another link not asked.
    mon.link_samples = [(100.0 + 0.25 * i, {"h0-s0": (0.5, 0.9), "h1-s0": (1.0, 1.0)}) for i in range(1, 9)]
    assert delivered_bytes(mon, {"h0-s0": 10.0}, 100.0, 102.0) == round(0.5 * 10e6 / 8 * 2)
    assert delivered_bytes(mon, {"h0-s0": 10.0}, 100.0, 101.0) == round(0.5 * 10e6 / 8 * 1.0)
    assert delivered_bytes(None, {"h0-s0": 10.0}, 0, 1) == 0


def test_fidelity_judges_a_program_from_its_first_marker_to_its_last():
    from emulator.run.runner import _judged_window

    class J:
        def __init__(self, program):
            self.program = program

    events = [{"kind": "exit", "start": 100.0, "end": 140.0},           # start-up and teardown: not judged
              {"kind": "collective", "start": 110.0, "end": 111.0},
              {"kind": "iteration", "start": 109.5, "end": 130.0}]
    assert _judged_window([J([{}])], events, 100.5, 141.0) == (109.5, 130.0)
    assert _judged_window([J(None)], events, 100.5, 141.0) == (100.5, 141.0)  # replays: as before
    assert _judged_window([J([{}])], events[:1], 100.5, 141.0) == (100.5, 141.0)  # no markers: all of it
