"""bench_engines.py --packet-seeds: ECMP-hashed points run the packet engine once per seed and compare
the median; a point with static routes runs once."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_engines  # noqa: E402


def test_hashed_points_run_one_packet_run_per_seed_and_take_the_median(tmp_path, monkeypatch):
    calls = []

    def fake_run_packet(pt, folder, seed=0):
        calls.append((pt["label"], seed))
        t = {0: 0.030, 1: 0.010, 2: 0.050}[seed]
        return {"status": "complete", "aggregate": {"iteration_time_s_mean": t},
                "jobs": [{"collectives": [{"cct_s": t}]}], "flows": [], "queues": []}, 1.0, None

    monkeypatch.setattr(bench_engines, "run_packet", fake_run_packet)
    assert bench_engines.main(["--engines", "packet", "--out", str(tmp_path), "--packet-seeds", "3",
                               "--only", "two jobs rail ecmp", "--only", "ring 256MiB single-switch"]) == 0
    assert sorted(calls) == [("all_reduce ring 256MiB single-switch", 0),
                             ("two jobs rail ecmp", 0), ("two jobs rail ecmp", 1), ("two jobs rail ecmp", 2)]
    rows = {r["label"]: r for r in json.load(open(tmp_path / "bench_engines.json"))}
    assert rows["two jobs rail ecmp"]["packet"] == 0.030 and rows["two jobs rail ecmp"]["packet_seeds"] == [
        0.030, 0.010, 0.050]
    assert rows["all_reduce ring 256MiB single-switch"]["packet_seeds"] == [0.030]
