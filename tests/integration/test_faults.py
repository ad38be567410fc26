"""Faulty runs for real: the controller restarting, an agent dying or hanging,
a switch failing, a straggler, and two runs at once. Each one ends by itself,
says what happened, and leaves nothing behind."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import (ROOT, assert_nothing_left, extra_set_args, run_experiment, start_run,
                                       wait_for_event, wall_s)

pytestmark = pytest.mark.mininet


def events(out):
    return [json.loads(line) for line in open(os.path.join(out, "events.jsonl"))]


def complete(summary):
    assert summary["status"] == "complete", summary["error"]
    integ = summary["integrity"]
    assert integ["bytes_sent_emulated"] == integ["bytes_received_emulated"] > 0
    assert integ["checksum_errors"] == 0


def test_controller_restart_mid_run_keeps_forwarding_and_resyncs(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("controller-restart.yaml", out)
    complete(summary)
    (fault,) = summary["faults"]
    assert fault["fault"] == "controller restart" and fault["ok"], fault
    # Fail-secure switches kept forwarding while no controller was there.
    during = [e for e in events(out) if e["kind"] == "transfer" and fault["stopped_at"] < e["end"] < fault["started_at"]]
    assert len(during) >= 10, len(during)
    # The new controller read back every switch and found it right: nothing resent.
    c = summary["controller"]["counters"]
    assert c["resyncs"] == 4 and c["resync_entries_kept"] > 0 and c["resync_entries_sent"] == 0, c
    log = open(out / "controller.log").read()
    assert len(re.findall(r"resync: it holds [1-9]\d* flows", log)) == 4
    assert_nothing_left(out)


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_a_dead_or_hung_agent_ends_the_run_naming_rank_and_step(tmp_path, how):
    out = tmp_path / "r"
    p, lines = start_run(out, "ring-single-switch.yaml", "testbed.stall_timeout_s=5")
    wait_for_event(out, "collective")
    pid = json.load(open(out / "state.json"))["pids"]["agent/j0/3"]
    t = time.monotonic()
    os.kill(pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    rest = p.communicate(timeout=wall_s(60))[0]
    took = time.monotonic() - t
    assert p.returncode == 1, rest
    # Death is seen at once; silence after stall_timeout_s (5 s). Then teardown.
    assert took < wall_s(15 if how == "killed" else 20), took
    (msg,) = [line for line in rest.splitlines() if line.startswith("dtnet: run failed:")]
    assert re.search(r"agent j0/rank 3 (died \(killed by SIGKILL\)|stopped responding: no heartbeat for [5-9] s); "
                     r"its last report \(\d\.\d s before\): in op it\d+/all_reduce \(iteration \d+\), step \d+: ",
                     msg), msg
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "incomplete" and "rank 3" in summary["error"]
    assert_nothing_left(out)


def test_a_switch_failing_mid_run_is_routed_around(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("switch-down-fat-tree.yaml", out)
    complete(summary)  # every flow finished, every byte checked
    down, up = summary["faults"]
    assert down["fault"] == "switch down" and down["ok"] and up["fault"] == "switch up" and up["ok"]
    # To its neighbours the crash was four links losing carrier at once.
    assert down["peers_down"] == ["core0", "core1", "edge0_0", "edge0_1"] and up["peers_down"] == []
    log = open(out / "controller.log").read()
    assert "agg0_0 disconnected" in log and log.count("agg0_0 ready") == 2
    # The four links go down within milliseconds, but the controller hears of
    # them one by one: a flow's first move may still use a link of agg0_0
    # that dies next. Its last move while the switch was down avoids it.
    state = json.load(open(out / "controller-state.json"))
    last = {d["flow"]: d for d in state["decisions"]
            if d["reason"] == "link down" and down["start"] <= d["time_s"] < up["start"]}
    assert last and not [d for d in last.values() if "agg0_0" in d["to"]], last
    assert_nothing_left(out)


@pytest.mark.fidelity  # an iteration-time ratio: holds only where the agents keep time
def test_a_straggler_stretches_compute_bound_iterations_by_its_factor(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("straggler.yaml", out)
    complete(summary)
    its = summary["jobs"][0]["iteration_time_s"]["all"]
    assert len(its) == 8
    computes = [e for e in events(out) if e["kind"] == "compute"]
    slowed = [e for e in computes if e.get("slowdown")]
    assert slowed and {e["rank"] for e in slowed} == {3} and {e["slowdown"] for e in slowed} == {3.0}
    first = min(e["iteration"] for e in slowed)
    before, after = its[1:first], its[first + 1:]  # the iteration the factor began in is mixed
    assert before and after
    # 20 ms of compute then a short all-reduce (m): (3 x 20 + m) / (20 + m), about 2.8.
    ratio = (sum(after) / len(after)) / (sum(before) / len(before))
    assert 2.4 < ratio < 3.1, (ratio, its)
    assert_nothing_left(out)


def test_two_runs_at_once_do_not_collide_and_a_third_on_a_busy_folder_is_refused(tmp_path):
    exp = os.path.join(ROOT, "experiments", "ring-single-switch.yaml")
    sets = ["--set", "topology.hosts=4", "--set", "jobs.0.workload.iterations=5", *extra_set_args()]
    procs = [subprocess.Popen([sys.executable, "-m", "dtnet", "run", exp, "--out", str(tmp_path / name), *sets],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
             for name in ("a", "b")]
    deadline = time.monotonic() + wall_s(120)
    while not (tmp_path / "a" / "state.json").exists():
        assert time.monotonic() < deadline and procs[0].poll() is None, "run a never started"
        time.sleep(0.1)
    t = time.monotonic()
    third = subprocess.run([sys.executable, "-m", "dtnet", "run", exp, "--out", str(tmp_path / "a"), *sets],
                           capture_output=True, text=True, cwd=ROOT, timeout=wall_s(60))
    assert time.monotonic() - t < wall_s(10) and third.returncode == 2, third.stdout + third.stderr
    assert "still going" in third.stderr and third.stderr.count("\n") == 1, third.stderr
    outs = [p.communicate(timeout=wall_s(300))[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    tags = set()
    for name in ("a", "b"):
        complete(json.load(open(tmp_path / name / "summary.json")))
        tags.add(json.load(open(tmp_path / name / "state.json"))["tag"])
        assert_nothing_left(tmp_path / name)
    assert len(tags) == 2
