"""bench/flow_results.py prints docs/flow-results.md's tables from real sweep outputs: small flow
sweeps of the same shapes stand in for the 1,024-GPU files."""
import re

import pytest

from bench import flow_results
from dtnet.cli import main

SWEEP = "sweep={grid: {controller.routing: [ecmp, congestion-aware]}}"
# results name -> (experiments/ file of the same shape, overrides)
STANDINS = {
    "gpt3-175b-1024": ("gpt-small-3d", [SWEEP, "jobs.0.workload.iterations=1"]),
    "jobs-1024-policies": ("two-jobs-coschedule", ["sweep={grid: {controller.routing: [ecmp, coschedule]}}"]),
    "moe-a2a-1024": ("moe-a2a-fat-tree", ["jobs.0.workload.iterations=1"]),
}


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    for name, (exp, sets) in STANDINS.items():
        argv = ["run", f"experiments/{exp}.yaml", "--engine", "flow", "--out", str(results / name)]
        for s in sets:
            argv += ["--set", s]
        assert main(argv) == 0, name
    return results


def rows(out: str, name: str) -> list[list[str]]:
    block = out.split(f"`{name}`")[1].split("\n\n")[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]


def test_every_table_has_a_row_per_point_with_its_policy(printed, capsys):
    assert flow_results.main(["--results", str(printed)]) == 0
    out = capsys.readouterr().out
    gpt = rows(out, "gpt3-175b-1024")
    assert sorted(r[1] for r in gpt) == ["congestion-aware", "ecmp"]
    assert all(re.fullmatch(r"\d+\.\d{3} s", r[3]) for r in gpt), gpt
    jobs = rows(out, "jobs-1024-policies")
    assert sorted(r[0] for r in jobs) == ["coschedule", "ecmp"]
    # Coschedule shifts jobs; ECMP has nothing to say there.
    assert [r[-1] == "-" for r in sorted(jobs)] == [False, True], jobs
    assert len(rows(out, "moe-a2a-1024")) >= 2
    assert "(gpt3-175b-16384: no results" in out
