"""A fabric from a file, and a workload imported from a real torch.distributed job, both on the
real testbed (OVS, Ryu, Mininet)."""
import json
import os

import pytest

from tests.integration.helpers import ROOT, assert_nothing_left, dtnet, run_experiment

pytestmark = pytest.mark.mininet


@pytest.mark.fidelity  # cct against the alpha-beta model
def test_dual_tor_fabric_file_runs_a_ring(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("fabric-file-dual-tor.yaml", out)
    assert summary["status"] == "complete", summary["error"]
    (job,) = summary["jobs"]
    (coll,) = job["collectives"]
    assert coll["op"] == "all_reduce" and coll["ranks"] == 4
    # Each GPU's first port runs at 200 Gb/s: the ring's time against the alpha-beta model.
    assert 0.85 <= coll["cct_vs_predicted"] <= 1.3, coll
    assert_nothing_left(out)


def test_an_imported_ddp_trace_replays(tmp_path):
    trace = tmp_path / "ddp.json"
    kin = [os.path.join(ROOT, "tests", "data", "torch", "ddp", f"kineto-rank{r}.json.gz") for r in range(4)]
    r = dtnet("trace", "import", "kineto", *kin, "--out", str(trace))
    assert r.returncode == 0, r.stderr
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "name: ddp-import\n"
        "topology: {kind: leaf-spine, leaves: 2, spines: 1, hosts_per_leaf: 2, link_gbps: 400}\n"
        "scale: {link: 2.5e-5, bytes: 1.0e-3}\n"
        f"jobs:\n  - name: ddp\n    hosts: all\n    workload: {{trace: {trace}}}\n")
    out = tmp_path / "r"
    r = dtnet("run", str(exp), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "complete"
    (job,) = summary["jobs"]
    assert job["ranks"] == 4 and job["iterations"] == 2
    assert sorted(c["size_bytes"] for c in job["collectives"]) == [525312, 526336]
    assert all(c["count"] == 2 for c in job["collectives"])
    assert_nothing_left(out)
