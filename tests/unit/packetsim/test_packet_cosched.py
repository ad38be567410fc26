"""Co-scheduling on `engine: packet`: the flow engine's phase gates hold each rank's communication in
the ns-3 driver until the controller's answer. Two 2-rank jobs whose rings both cross the one spine
of a leaf-spine fabric: without gates their all-reduces start together and share the spine links;
with them the second job's answer shifts it, and no rank starts a gated op before its answer."""
from __future__ import annotations

import csv
import json

import pytest
import yaml

from dtnet.cli import main
from packetsim import ns3

needs_ns3 = pytest.mark.skipif(not ns3.available(), reason="ns-3 (libns3-dev) is not installed")
SIZE_BYTES = 16 << 20
COMPUTE_MS = 1.0


def _run(tmp_path, routing, params=None, compute_b_ms=COMPUTE_MS):
    """(summary, events) of two jobs, h0-h2 and h1-h3, both crossing leaf0 <-> spine0 <-> leaf1."""
    wl = {"collective": "all_reduce", "algorithm": "ring", "size_bytes": SIZE_BYTES, "iterations": 2,
          "compute_ms": COMPUTE_MS}
    ctl = {"policy": routing, **({"params": params} if params else {})}
    data = {"name": f"two-{routing}", "engine": "packet", "controller": ctl,
            "topology": {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2, "link_gbps": 100},
            "jobs": [{"name": "a", "hosts": ["h0", "h2"], "workload": wl},
                     {"name": "b", "hosts": ["h1", "h3"], "workload": {**wl, "compute_ms": compute_b_ms}}]}
    p = tmp_path / f"{routing}.yaml"
    p.write_text(yaml.safe_dump(data))
    out = tmp_path / routing
    assert main(["run", str(p), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "complete"
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    return s, events


def _window(events, job, it):
    """(first start, last end) of a job's all-reduce of one iteration over its ranks."""
    ops = [e for e in events if e["kind"] == "collective" and e["job"] == job and e["iteration"] == it]
    assert len(ops) == 2
    return min(e["start"] for e in ops), max(e["end"] for e in ops)


@needs_ns3
def test_without_gates_the_two_all_reduces_overlap(tmp_path):
    _, events = _run(tmp_path, "congestion-aware")
    (a0, a1), (b0, b1) = _window(events, "a", 0), _window(events, "b", 0)
    # Both are ready after the same compute: they start together and share the spine links.
    assert abs(a0 - COMPUTE_MS / 1e3) < 1e-4 and abs(b0 - COMPUTE_MS / 1e3) < 1e-4
    assert min(a1, b1) - max(a0, b0) > 0.5 * min(a1 - a0, b1 - b0)
    assert not [e for e in events if e["kind"] in ("announce", "offset")]


@needs_ns3
def test_with_gates_the_shifted_job_starts_no_earlier_than_its_answer(tmp_path):
    s, events = _run(tmp_path, "coschedule")
    ann = [e for e in events if e["kind"] == "announce" and e["iteration"] == 0]
    assert {e["job"] for e in ann} == {"a", "b"} and all(e["status"] == "answered" for e in ann)
    (late,) = [e for e in ann if e["offset_s"] > 0]  # the controller shifts one of the two
    other = "a" if late["job"] == "b" else "b"
    start, _ = _window(events, late["job"], 0)
    assert start >= late["start"] + late["offset_s"] - 1e-9
    o0, o1 = _window(events, other, 0)
    # The shift keeps the shifted job off the spine for most of the other's all-reduce.
    assert start - o0 > 0.5 * (o1 - o0)
    offsets = [e for e in events if e["kind"] == "offset" and e["job"] == late["job"] and e["iteration"] == 0]
    assert len(offsets) == 2 and all(abs(e["end"] - (late["start"] + late["offset_s"])) < 1e-9 for e in offsets)
    assert {row["job"] for row in s["announcements"]} == {"a", "b"}
    assert "paces" in s["controller"]["counters"]


@needs_ns3
def test_no_rank_starts_a_gated_op_before_its_answer(tmp_path):
    _, events = _run(tmp_path, "coschedule")
    answer = {(e["job"], e["iteration"]): e["start"] + e["offset_s"] for e in events if e["kind"] == "announce"}
    gated = [e for e in events if e["kind"] == "collective"]
    assert len(gated) == 8 and all((e["job"], e["iteration"]) in answer for e in gated)
    for e in gated:
        assert e["start"] >= answer[e["job"], e["iteration"]] - 1e-9, e
        assert e["ready"] <= e["start"]


@needs_ns3
def test_an_answer_that_paces_caps_the_paced_jobs_hosts_inside_its_window(tmp_path):
    # One offset step (no shift) and unequal compute: the less GPU-intense job is told to pace.
    s, events = _run(tmp_path, "coschedule", params={"offset_steps": 1}, compute_b_ms=3 * COMPUTE_MS)
    paced = [e for e in events if e["kind"] == "announce" and e["pace_share"]]
    assert paced and s["controller"]["counters"]["paces"] == len(paced)
    assert any("pace answers applied" in x for x in s["model"]["statements"])
    nic_gbps = 100.0
    with open(tmp_path / "coschedule" / "links.csv") as f:
        rows = list(csv.DictReader(f))
    bin_s = s["model"]["link_bin_s"]
    for e in paced:
        hosts = {"a": ("h0", "h2"), "b": ("h1", "h3")}[e["job"]]
        lo, hi = e["start"] + e["pace_from_s"], e["start"] + e["pace_until_s"]
        for h in hosts:  # its NIC's intervals wholly inside the window: on average at the share
            inside = [float(r["gbps"]) for r in rows if r["src"] == h and lo <= float(r["t_s"]) - bin_s
                      and float(r["t_s"]) <= hi]
            mean = sum(inside) / max(1, len(inside))
            # frames carry 0.6% more than the payload the pacer counts, and it bursts two segments
            assert 0.5 * e["pace_share"] * nic_gbps <= mean <= 1.03 * e["pace_share"] * nic_gbps, (h, mean, e)
