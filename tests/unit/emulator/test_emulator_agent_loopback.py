"""Real agents on loopback (no root, no Mininet) running a 3D-parallel GPT plan:
every op runs once, none before its dependencies, and the iteration splits
into compute, communication and pipeline bubble."""
import os

from experiment import model
from experiment.plan import build_plans
from tests.unit.controller.test_announce import _run_agents

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_a_pipeline_plan_runs_every_op_after_its_dependencies(tmp_path):
    exp = model.load(os.path.join(ROOT, "experiments", "gpt-small-3d.yaml"),
                      ["jobs.0.workload.iterations=1", "scale.bytes=2.5e-5"])  # dilation 1: quick
    (job,) = build_plans(exp, exp.fabric())
    events, _ = _run_agents(tmp_path, exp, lambda it: (0.0, "fallback"))
    ops = [e for e in events if e["kind"] in ("compute", "collective", "send", "recv")]
    by_rank = {p.rank: p.ops for p in job.ranks}
    assert len(ops) == sum(len(v) for v in by_rank.values())
    seen = {(e["rank"], e["op_id"]): e for e in ops}
    assert len(seen) == len(ops)  # each op exactly once
    for rank, plan_ops in by_rank.items():
        for spec in plan_ops:
            e = seen[rank, spec.id]
            for d in spec.deps:
                assert e["start"] >= seen[rank, plan_ops[d].id]["end"] - 1e-6, (rank, spec.id)
    # pp=2: stage 1 waits for stage 0's first activations, a bubble the split must show.
    from experiment.outputs.summary import job_results
    b = job_results(job.name, ops, dilation=1.0)["breakdown_s"]
    assert b["compute"] > 0 and b["idle"] > 0
