"""A real sweep, interrupted after its first point and resumed: the first point is not run again."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import ROOT, assert_nothing_left, dtnet

pytestmark = pytest.mark.mininet

SWEEP = """\
name: tiny-sweep
topology: {kind: single-switch, hosts: 4, link_gbps: 400}
scale: {link: 2.5e-5, bytes: 1.0e-3}
jobs:
  - name: j0
    hosts: all
    workload: {collective: all_reduce, algorithm: ring, size_bytes: 67108864, iterations: 2}
sweep:
  grid:
    jobs.0.workload.iterations: [2, 40]
"""
FIRST, SECOND = "iterations=2", "iterations=40"


def _wait_for_line(p, text, lines, timeout_s=180):
    deadline = time.monotonic() + timeout_s
    for line in p.stdout:  # a condition, not a sleep
        lines.append(line)
        if text in line:
            return
        assert time.monotonic() < deadline, "".join(lines)
    raise AssertionError(f"sweep ended before {text!r}: " + "".join(lines))


def _rows(out):
    with open(out / "sweep.csv") as f:
        return {r["point"]: r for r in csv.DictReader(f)}


def test_an_interrupted_sweep_resumes_and_skips_the_point_done(tmp_path):
    exp, out = tmp_path / "sweep.yaml", tmp_path / "s"
    exp.write_text(SWEEP)
    p = subprocess.Popen([sys.executable, "-m", "dtnet", "run", str(exp), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        _wait_for_line(p, f"{SECOND}: running (point 2 of 2)", lines)
        _wait_for_line(p, "replaying", lines)  # the second point's agents are at work
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 130, "".join(lines) + rest
    first = out / "points" / FIRST
    assert json.load(open(first / "summary.json"))["status"] == "complete"
    assert json.load(open(out / "points" / SECOND / "summary.json"))["status"] == "incomplete"
    rows = _rows(out)
    assert rows[FIRST]["status"] == "complete" and float(rows[FIRST]["j0.iteration_time_s_mean"]) > 0
    assert rows[SECOND]["status"] == "interrupted" and rows[SECOND]["j0.iteration_time_s_mean"] == ""
    assert_nothing_left(out / "points" / SECOND)
    mtime = os.path.getmtime(first / "summary.json")

    r = dtnet("run", str(exp), "--out", str(out), "--set", "jobs.0.workload.algorithm=ring")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{FIRST}: skipped, complete in an earlier run" in r.stdout
    assert f"{SECOND}: running" in r.stdout and f"{FIRST}: running" not in r.stdout
    assert os.path.getmtime(first / "summary.json") == mtime
    rows = _rows(out)
    assert [rows[k]["status"] for k in (FIRST, SECOND)] == ["complete", "complete"]
    assert json.load(open(out / "points" / SECOND / "summary.json"))["jobs"][0]["iterations"] == 40
    assert (out / "sweep.png").stat().st_size > 2000
    assert_nothing_left(out / "points" / SECOND)
