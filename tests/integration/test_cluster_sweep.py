"""An emulator sweep through a local cluster of one worker process, on real OVS: the same
point folders as the same sweep run here, the points one at a time, nothing left behind."""
import csv
import json
import os
import re

import pytest

from tests.integration.helpers import assert_nothing_left, dtnet

pytest.importorskip("distributed")
pytestmark = pytest.mark.mininet

SWEEP = """\
name: cluster-sweep
topology: {kind: single-switch, hosts: 4, link_gbps: 400}
scale: {link: 2.5e-5, bytes: 1.0e-3}
jobs:
  - name: j0
    hosts: all
    workload: {collective: all_reduce, algorithm: ring, size_bytes: 67108864, iterations: 3}
sweep:
  grid:
    controller.routing: [ecmp, shortest]
"""
POINTS = ("routing=ecmp", "routing=shortest")


def _files(folder):
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder) for n in names)


def _rows(out):
    with open(out / "sweep.csv") as f:
        return {r["point"]: r for r in csv.DictReader(f)}


def test_a_two_point_emulator_sweep_on_a_one_worker_cluster_matches_a_local_run(tmp_path):
    exp = tmp_path / "sweep.yaml"
    exp.write_text(SWEEP)
    local, remote = tmp_path / "local", tmp_path / "cluster"
    r = dtnet("run", str(exp), "--out", str(local))
    assert r.returncode == 0, r.stdout + r.stderr
    r = dtnet("run", str(exp), "--out", str(remote), "--workers", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "emulator points one at a time" in out, out
    # One emulator point at a time on the worker, though it has a slot per core.
    order = re.findall(r"(routing=\w+): (running|complete)", out)
    assert order == [(POINTS[0], "running"), (POINTS[0], "complete"), (POINTS[1], "running"),
                     (POINTS[1], "complete")] or order == [(POINTS[1], "running"), (POINTS[1], "complete"),
                                                           (POINTS[0], "running"), (POINTS[0], "complete")], out
    lr, cr = _rows(local), _rows(remote)
    assert list(lr) == list(cr) == list(POINTS) and list(next(iter(lr.values()))) == list(next(iter(cr.values())))
    for p in POINTS:
        assert lr[p]["status"] == cr[p]["status"] == "complete"
        a, b = local / "points" / p, remote / "points" / p
        assert _files(a) == _files(b)
        assert (a / "config.yaml").read_text() == (b / "config.yaml").read_text()
        sa, sb = (json.load(open(f / "summary.json")) for f in (a, b))
        assert sa["jobs"][0]["iterations"] == sb["jobs"][0]["iterations"] == 3
        # The same emulation on the same machine, one point at a time: figures within 20%.
        for key in ("j0.iteration_time_s_mean", "busbw_gbps_mean"):
            ratio = float(cr[p][key]) / float(lr[p][key])
            print(f"{p} {key}: local {float(lr[p][key]):.4g}, cluster {float(cr[p][key]):.4g}, ratio {ratio:.3f}")
            assert 0.8 < ratio < 1.25, (p, key, lr[p][key], cr[p][key])
        assert_nothing_left(b)
    assert (remote / "sweep.png").stat().st_size > 2000
