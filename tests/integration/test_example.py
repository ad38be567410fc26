"""examples/sweep_from_python.py for real: the Python API drives a sweep on the emulator."""
import json
import os
import subprocess
import sys

import pytest

from tests.integration.helpers import ROOT, assert_nothing_left

pytestmark = pytest.mark.mininet


def test_the_python_api_example_runs_its_sweep_on_the_emulator(tmp_path):
    out = tmp_path / "ex"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "sweep_from_python.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(out / "busbw.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    busbw = {}
    for point in os.listdir(out / "points"):
        folder = out / "points" / point
        with open(folder / "summary.json") as f:
            s = json.load(f)
        assert s["status"] == "complete"
        (c,) = s["jobs"][0]["collectives"]
        busbw[c["algorithm"], c["size_bytes"]] = c["busbw_gbps"]
        assert_nothing_left(folder)
    assert len(busbw) == 6
    for alg in ("ring", "halving-doubling"):  # bandwidth-bound sizes beat the latency-bound one
        assert busbw[alg, 64 << 20] > busbw[alg, 1 << 20]
    assert busbw["ring", 64 << 20] > 0.7 * 400  # a ring over spread hosts nears the 400 Gb/s links
