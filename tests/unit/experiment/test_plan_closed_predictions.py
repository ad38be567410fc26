"""The plan's alpha-beta predictions from closed forms equal those from the built schedules, on
experiment files and on every algorithm (the flow and packet engines write them into summary.json)."""
import os

import pytest

from experiment import plan
from experiment.model import load
from traffic.collectives import build_schedule, predict_time_s

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
POINTS = [  # (experiment file, --set overrides)
    ("collectives-rail.yaml", ["jobs.0.workload.algorithm=hierarchical"]),
    ("collectives-rail.yaml", ["jobs.0.workload.algorithm=direct"]),
    ("collectives-rail.yaml", ["jobs.0.workload.algorithm=ring", "jobs.0.order=rail-aligned"]),
    ("collectives-rail.yaml", ["jobs.0.workload.algorithm=tree"]),
    ("collectives-fat-tree.yaml", ["jobs.0.workload.algorithm=halving-doubling"]),
    ("collectives-fat-tree.yaml", ["jobs.0.workload.algorithm=direct", "jobs.0.workload.collective=all_gather"]),
    ("moe-a2a-rail.yaml", []),
    ("moe-a2a-rail.yaml", ["jobs.0.workload.algorithm=hierarchical"]),
    ("gpt-small-3d.yaml", []),
    ("two-jobs-coschedule.yaml", []),
    ("ring-rail-32.yaml", ["flow.slice_bytes=1000000"]),
    ("three-jobs-contending.yaml", []),
]


def _from_schedule(op, algorithm, n, size_bytes, *args, root, schedule_gpus_per_server, **kw):
    """The prediction as it was made before the closed forms: on the built schedule."""
    return predict_time_s(build_schedule(op, algorithm, n, size_bytes, root=root,
                                         gpus_per_server=schedule_gpus_per_server), *args, **kw)


def _predictions(exp):
    fabric = exp.fabric()
    return [plan.job_predictions(exp, fabric, jp) for jp in plan.job_traces(exp, fabric)]


@pytest.mark.parametrize("name,overrides", POINTS)
def test_closed_forms_give_the_schedules_numbers(name, overrides, monkeypatch):
    exp = load(os.path.join(ROOT, "experiments", name), overrides + ["sweep={}"])
    new = _predictions(exp)
    monkeypatch.setattr(plan, "collective_predict_time_s", _from_schedule)
    old = _predictions(exp)
    assert [sorted(j) for j in new] == [sorted(j) for j in old] and any(new)
    for n_job, o_job in zip(new, old):
        for key, times in o_job.items():
            assert n_job[key] == pytest.approx(times, rel=1e-9, abs=0), key
