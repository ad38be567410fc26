"""flow.start_jitter_ns: each rank starts at its job's start plus the packet engine's draw for the
same keys, so a replicate starts both engines alike; the co-scheduling controller then hears the
jobs' announcements in the order the offsets give."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from badinput import InputError
from dtnet.cli import main
from experiment import model
from experiment.plan import job_traces, start_offsets_s
from packetsim import scenario

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
THREE_JOBS = os.path.join(ROOT, "experiments", "three-jobs-contending.yaml")


def _three_jobs(tmp_path, *sets):
    exp = model.load(THREE_JOBS, ["sweep={}", "controller.routing=coschedule",
                                  *[f"jobs.{j}.workload.{k}" for j in range(3)
                                    for k in ("size_bytes=16777216", "iterations=3", "compute_ms=1")], *sets])
    return exp


def test_the_draws_are_the_packet_engines_and_stay_within_the_bound():
    offsets = start_offsets_s(180, 4, "a", 8)
    assert offsets == start_offsets_s(180, 4, "a", 8) != start_offsets_s(180, 5, "a", 8)
    assert all(0 <= x <= 180e-9 for x in offsets) and len(set(offsets)) == 8
    assert start_offsets_s(0, 4, "a", 3) == [0.0, 0.0, 0.0]
    exp = model.parse({"name": "r", "engine": "packet", "topology": {"kind": "single-switch", "hosts": 8},
                       "jobs": [{"name": "a", "workload": {"collective": "all_reduce", "size_bytes": 1 << 24}}],
                       "packet": {"start_jitter_ns": 180, "start_seed": 4}}, "r.yaml")
    fabric = exp.fabric()
    sc = scenario.build(exp, fabric, job_traces(exp, fabric), 1 << 14)
    starts = {ot.rank: sum(sc.durations[t] for t in sc.earlier[ot.start]) for ot in sc.ops if not ot.op.deps}
    assert [starts[r] for r in range(8)] == offsets


def test_each_rank_starts_at_its_offset_and_bad_values_are_one_line_errors(tmp_path):
    data = {"name": "r", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
            "jobs": [{"name": "a", "workload": {"collective": "all_reduce", "size_bytes": 1 << 26, "iterations": 1}}],
            "flow": {"start_jitter_ns": 5000, "start_seed": 2}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    first = {e["rank"]: e["start"] for e in events if e["kind"] == "collective"}
    t0 = min(first.values())
    offsets = start_offsets_s(5000, 2, "a", 4)
    for r, start in first.items():
        assert start - t0 == pytest.approx(offsets[r] - min(offsets), abs=1e-12)
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["model"]["start_jitter"] == {"start_jitter_ns": 5000, "start_seed": 2}
    assert any("flow.start_seed 2" in x for x in s["model"]["statements"])
    with pytest.raises(InputError) as e:
        model.parse({**data, "flow": {"start_jitter_ns": -5}}, "r.yaml")
    assert "flow.start_jitter_ns" in str(e.value)


def test_a_co_scheduled_replicate_hears_the_jobs_in_the_order_their_offsets_give(tmp_path):
    """The same three jobs, every rank at once and then drawn apart: the first announcement comes
    from the job whose announcing rank starts first, and the controller's schedule follows it."""
    from flowsim.runner import run_experiment

    orders = {}
    for seed in (0, 1, 2, 3):
        sets = ["flow.start_jitter_ns=180", f"flow.start_seed={seed}"] if seed else []
        exp = _three_jobs(tmp_path, "engine=flow", *sets)
        out = tmp_path / f"s{seed}"
        assert run_experiment(exp, str(out), log=lambda m: None)["status"] == "complete"
        events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
        orders[seed] = [e["job"] for e in events if e["kind"] == "announce" and e["iteration"] == 0]
        if seed:
            first = {j.name: start_offsets_s(180, seed, j.name, 3)[0] for j in exp.jobs}  # rank 0 announces
            assert orders[seed] == sorted(first, key=first.get)
    assert orders[0] == ["a", "b", "c"]  # at once: in the order of the file
    assert len({tuple(o) for o in orders.values()}) > 1
