"""The spine for real: OVS fabric, Ryu controller process, agents in Mininet hosts.

Thresholds are relationships with tolerance (busbw against the configured
link rate), not exact figures; bench/ holds the careful measurements.
"""
import json
import os
import signal
import time

import pytest

from tests.integration.helpers import ROOT, assert_nothing_left, dtnet, run_experiment, start_run, wait_for_event, wall_s

pytestmark = pytest.mark.mininet
LINK_GBPS = 400


def _check_ring(summary, ranks):
    assert summary["status"] == "complete", summary["error"]
    job = summary["jobs"][0]
    assert job["ranks"] == ranks and job["iterations"] == 3
    (coll,) = job["collectives"]
    assert coll["op"] == "all_reduce" and coll["count"] == 3
    # nccl-tests definitions hold between the reported figures.
    assert coll["busbw_gbps"] == pytest.approx(coll["algbw_gbps"] * 2 * (ranks - 1) / ranks)
    assert coll["algbw_gbps"] == pytest.approx(coll["size_bytes"] * 8 / coll["cct_s"] / 1e9)
    # Every byte sent arrived, checksums verified, and the agents were not
    # the bottleneck: the ring ran near the bottleneck link's rate.
    integ = summary["integrity"]
    assert integ["bytes_sent_emulated"] == integ["bytes_received_emulated"] > 0
    assert integ["checksum_errors"] == 0
    assert coll["busbw_gbps"] >= 0.7 * LINK_GBPS, coll
    assert coll["busbw_gbps"] <= 1.0 * LINK_GBPS, "faster than the links: shaping failed"
    assert isinstance(summary["fidelity"]["ok"], bool)
    return coll


@pytest.mark.fidelity  # busbw threshold: holds only where the emulation keeps up
def test_ring_single_switch(tmp_path):
    out = tmp_path / "r"
    summary, proc = run_experiment("ring-single-switch.yaml", out)
    _check_ring(summary, 8)
    assert "busbw Gb/s" in proc.stdout and "fidelity:" in proc.stdout
    events = [json.loads(l) for l in open(out / "events.jsonl")]
    assert {e["kind"] for e in events} >= {"collective", "transfer"}
    assert summary["controller"]["ready"] is True
    assert_nothing_left(out)


@pytest.mark.fidelity  # busbw threshold: holds only where the emulation keeps up
def test_ring_fat_tree_with_ecmp(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("ring-fat-tree.yaml", out)
    _check_ring(summary, 16)
    assert summary["topology"]["switches"] == 20
    assert len(summary["controller"]["switches_ready"]) == 20
    assert_nothing_left(out)


@pytest.mark.fidelity  # busbw threshold: holds only where the emulation keeps up
def test_ring_rail_optimized_32(tmp_path):
    out = tmp_path / "r"
    summary, _ = run_experiment("ring-rail-32.yaml", out)
    _check_ring(summary, 32)
    # Only the 8 rails and 4 spines are OpenFlow; NVLink domains are kernel bridges.
    assert len(summary["controller"]["switches_ready"]) == 12
    assert_nothing_left(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_tears_down_and_keeps_events(tmp_path, sig):
    out = tmp_path / "r"
    p, _ = start_run(out)
    wait_for_event(out, "collective")  # so that there is something to keep
    t = time.monotonic()
    p.send_signal(sig)
    rest = p.communicate(timeout=wall_s(30))[0]
    took = time.monotonic() - t
    assert took < wall_s(10), f"teardown took {took:.1f} s, more than {wall_s(10):g} s"
    assert p.returncode == 130, rest
    summary = json.load(open(out / "summary.json"))
    assert summary["status"] == "incomplete"
    events = [json.loads(l) for l in open(out / "events.jsonl")]
    assert any(e["kind"] == "collective" for e in events)
    assert_nothing_left(out)


def test_sigkill_then_dtnet_clean_removes_exactly_that_run(tmp_path):
    out = tmp_path / "r"
    p, _ = start_run(out, "ring-single-switch.yaml")
    st = json.load(open(out / "state.json"))
    p.kill()
    p.wait(wall_s(10))
    from emulator.testbed import runstate
    left = runstate.leftovers(st["tag"])
    r = dtnet("clean", str(out))  # before asserting: a failed test must not leave the run behind
    # The shared daemon's bridges, or the run's own daemons' namespace and sockets (switch_daemons: auto).
    assert left["bridges"] or left["netns"] and left["daemon_dirs"], f"nothing to clean: the test proves nothing: {left}"
    assert r.returncode == 0, r.stdout + r.stderr
    assert "killed ovs-vswitchd" in r.stdout or left["bridges"], r.stdout
    assert_nothing_left(out)


def test_check_and_bad_input_exit_codes(tmp_path):
    r = dtnet("check", os.path.join(ROOT, "experiments", "demo.yaml"))
    assert r.returncode == 0 and "ok" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopology: {kind: fat-tree, k: 3}\nscale: {link: 2.5e-5, bytes: 1.0e-3}\njobs: []\n")
    r = dtnet("run", str(bad), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "topology.k" in r.stderr
    assert "Traceback" not in r.stderr
