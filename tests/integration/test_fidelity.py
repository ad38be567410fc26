"""The fidelity verdict is honest: load the CPU on purpose during a run and
the run must say it was not faithful, naming the CPU check."""
import os
import subprocess
import sys

import pytest

from emulator.testbed.process import stop_process
from tests.integration.helpers import assert_nothing_left, run_experiment

pytestmark = pytest.mark.mininet

BURN = "while True:\n    pass\n"


def test_an_overloaded_cpu_turns_fidelity_false(tmp_path):
    # Two busy loops per core, started and ended by this test alone (by PID).
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2 * len(os.sched_getaffinity(0)))]
    try:
        summary, r = run_experiment("ring-single-switch.yaml", tmp_path / "r")
    finally:
        for p in burners:
            stop_process(p)
    assert summary["status"] == "complete", summary["error"]
    cpu = next(c for c in summary["fidelity"]["checks"] if c["name"] == "cpu")
    assert not cpu["ok"] and cpu["seconds_below"] > 0, cpu
    assert summary["fidelity"]["ok"] is False and "suggested_scale" in summary["fidelity"]
    assert "NOT FAITHFUL" in r.stdout and "cpu" in r.stdout
    assert_nothing_left(tmp_path / "r")
