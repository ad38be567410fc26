"""`dtnet run --auto-scale` for real: the probes run, one of them is chosen, and the run and its
record say which and why."""
import json

import pytest
import yaml

from tests.integration.helpers import assert_nothing_left, dtnet

pytestmark = pytest.mark.mininet

# 4 GPUs, ring all-reduce of 256 MiB: ~0.3 s of replay an iteration at dilation 40, so a probe
# keeps 10 of the 12 iterations (~3 s). 5 Mb/s to start: faithful on a quiet machine.
EXPERIMENT = """\
name: tiny-autoscale
topology: {kind: single-switch, hosts: 4, link_gbps: 400}
scale: {link: 1.25e-5, bytes: 5.0e-4}
jobs:
  - name: j0
    hosts: all
    workload: {collective: all_reduce, algorithm: ring, size_bytes: 268435456, iterations: 12}
"""


@pytest.mark.fidelity  # wants a faithful probe
def test_auto_scale_runs_at_a_faithful_probe_and_records_the_calibration(tmp_path):
    exp, out = tmp_path / "exp.yaml", tmp_path / "r"
    exp.write_text(EXPERIMENT)
    r = dtnet("run", str(exp), "--auto-scale", "--out", str(out), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "complete", summary["error"]
    cal = summary["calibration"]
    probes = {p["dir"]: p for p in cal["probes"]}
    assert 1 <= len(probes) <= cal["max_probes"]
    chosen = probes[cal["chosen"]["dir"]]  # one of the probes ...
    assert chosen["ok"] and chosen["fidelity_ok"] and chosen["status"] == "complete" and cal["faithful"]
    # ... the largest faithful one tried, and the run used it, whole.
    assert chosen["link"] == max(p["link"] for p in probes.values() if p["ok"])
    assert summary["scale"]["link"] == chosen["link"] and summary["scale"]["bytes"] == chosen["bytes"]
    assert summary["jobs"][0]["iterations"] == 12
    assert cal["iterations"] == {"j0": {"probe": 10, "run": 12}}
    assert json.load(open(out / "calibration" / "calibration.json")) == cal
    for p in probes.values():  # complete records, each probe a run folder of its own
        assert set(p) >= {"link", "bytes", "normalized_throughput", "fidelity_ok", "failed_checks", "wall_s"}
        assert p["bytes"] / p["link"] == pytest.approx(40)  # the dilation is kept
        assert p["ok"] == (not p["failed_checks"])
        ps = json.load(open(out / p["dir"] / "summary.json"))
        assert ps["jobs"][0]["iterations"] == 10 and ps["scale"]["link"] == p["link"]
        assert ps["traffic"]["normalized_throughput"] == p["normalized_throughput"]
        assert_nothing_left(out / p["dir"])
    config_yaml = (out / "config.yaml").read_text()
    assert "# scale chosen by --auto-scale from link=1.25e-05" in config_yaml
    assert yaml.safe_load(config_yaml)["scale"] == {"link": chosen["link"], "bytes": chosen["bytes"]}
    assert "calibration (--auto-scale)" in r.stdout and "<- chosen" in r.stdout
    assert_nothing_left(out)
