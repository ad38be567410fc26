"""bench_engines.py --reference packet: its points cover what the issue asks (16 to 1,024 GPUs,
every algorithm, transports, policies, both classes), every override is a key the experiment
model takes, and the verdict fails a class that misses its goal."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import flow_vs_packet as fvp  # noqa: E402
from experiment import model  # noqa: E402


@pytest.fixture(scope="module")
def loaded():
    return [(p, model.load(p["file"], [*p["sets"], "engine=packet"])) for p in fvp.points()]


def test_at_least_24_points_from_16_to_1024_gpus(loaded):
    assert len(loaded) >= 24 and len({p["label"] for p, _ in loaded}) == len(loaded)
    gpus = [exp.fabric().host_count for _, exp in loaded]
    assert min(gpus) <= 16 and max(gpus) >= 1024


def test_the_points_cover_algorithms_transports_and_policies(loaded):
    algs = {(exp.jobs[0].workload.get("collective", "all_reduce"), exp.jobs[0].workload.get("algorithm"))
            for _, exp in loaded if isinstance(exp.jobs[0].workload, dict)}
    for want in [("all_reduce", a) for a in ("ring", "tree", "halving-doubling", "direct", "hierarchical")] + \
            [("all_gather", "ring"), ("reduce_scatter", "ring"), ("all_to_all", "direct"),
             ("all_to_all", "hierarchical")]:
        assert want in algs, want
    assert {exp.transport.tcp.cc for _, exp in loaded} >= {"cubic", "dctcp"}
    assert {exp.transport.mtu_bytes for _, exp in loaded} >= {4096, 9000}
    assert {exp.routing for _, exp in loaded} >= {"ecmp", "congestion-aware", "coschedule", "spray"}
    lat = {exp.transport.latency_us.host for _, exp in loaded if exp.transport.latency_us is not None}
    assert lat == {0, 2, 10}
    assert {p["cls"] for p, _ in loaded} == {fvp.BANDWIDTH, fvp.A2A, fvp.INCAST, fvp.LATENCY}
    groups = {}
    for p, _ in loaded:
        if p.get("contend"):
            groups.setdefault(p["contend"], set()).add(p["policy"])
    assert all(len(v) >= 2 for v in groups.values()) and len(groups) == 4


def test_each_study_of_the_results_page_has_a_point_near_its_size(loaded):
    # docs/flow-results.md: several jobs, MoE all-to-all and a 3D iteration, checked at 64 GPUs or more
    wanted = fvp.near_results()
    near = [(p, exp) for p, exp in loaded if p in wanted]
    assert len(near) >= 6 and all(exp.fabric().host_count >= 64 for _, exp in near)
    assert sum(len(exp.jobs) == 4 for _, exp in near) == 3
    assert {exp.jobs[0].workload.get("algorithm") for _, exp in near if isinstance(exp.jobs[0].workload, dict)
            and exp.jobs[0].workload.get("collective") == "all_to_all"} == {"direct", "hierarchical"}
    assert any(p.get("breakdown") for p, _ in near)


def _row(label, cls, ratio, contend=None, policy=None, flow=1.0):
    return {"label": label, "cls": cls, "ratio": ratio, "flow": flow, "packet": flow / ratio, "figure": "cct",
            "contend": contend, "policy": policy, "packet_retx": 0, "packet_drops": 0}


def test_the_verdict_holds_only_when_every_class_meets_its_goal(capsys):
    good = [_row(f"b{i}", fvp.BANDWIDTH, 1.01) for i in range(5)] + [_row(f"o{i}", fvp.A2A, 0.95) for i in range(5)]
    assert fvp.verdict(good)
    bad = good[:-1] + [_row("o5", fvp.INCAST, 0.5), _row("o6", fvp.INCAST, 0.6)]
    assert not fvp.verdict(bad)
    assert "miss: o5: flow/packet 0.500" in capsys.readouterr().out
    flipped = good + [_row("x", fvp.BANDWIDTH, 1.0, "g", "ecmp", 1.0), _row("y", fvp.BANDWIDTH, 1.0, "g", "spray", 2.0)]
    flipped[-1]["packet"], flipped[-2]["packet"] = 1.0, 2.0  # the packet engine orders them the other way
    assert not fvp.verdict(flipped)


def test_packet_settings_reach_the_packet_runs_only(monkeypatch):
    import bench_engines
    p = next(p for p in fvp.points() if p["label"].startswith("incast"))
    sets = ["transport.tcp.tail_loss_probe=true"]
    assert fvp._load(p, "packet", sets).transport.tcp.tail_loss_probe is True
    assert fvp._load(p, "packet").transport.tcp.tail_loss_probe is None
    seen = []
    monkeypatch.setattr(fvp, "main", lambda args: seen.append(args) or 0)  # parse, run nothing
    assert bench_engines.main(["--reference", "packet", "--packet-set", sets[0], "--flow-set", "flow.headers=ppp"]) == 0
    assert seen[0].packet_set == sets and seen[0].flow_set == ["flow.headers=ppp"]


def test_replicates_take_the_median_of_jittered_packet_runs_as_the_reference(tmp_path, monkeypatch, capsys):
    """--packet-replicates K: K more packet runs per point, each with packet.start_jitter_ns and its own
    packet.start_seed, in folders of their own; the ratio is against their median, the plain run kept beside."""
    import bench_engines
    calls = []

    def summary(t):
        return {"status": "complete", "aggregate": {"iteration_time_s_mean": t}, "model": {"events": 1,
                "collective_model": "detailed"}, "jobs": [{"collectives": [{"cct_s": t}]}], "flows": [], "queues": []}

    times = {(): 0.0030, ("packet.start_jitter_ns=180", "packet.start_seed=1"): 0.0020,
             ("packet.start_jitter_ns=180", "packet.start_seed=2"): 0.0021, ("packet.start_jitter_ns=180", "packet.start_seed=3"): 0.0025}

    def fake_packet(pt, folder, packet_sets=()):
        extra = tuple(packet_sets[1:])
        calls.append((os.path.relpath(folder, tmp_path), extra))
        return summary(times[extra]), 1.0, 1.0

    monkeypatch.setattr(fvp, "run_packet", fake_packet)
    monkeypatch.setattr(fvp, "run_flow", lambda pt, folder, sets: (summary(0.0021), 0.5))
    bench_engines.main(["--reference", "packet", "--out", str(tmp_path), "--only", "halving-doubling 16",
                        "--packet-set", "transport.tcp.tail_loss_probe=true", "--packet-replicates", "3"])
    point = "halving-doubling_16_32MiB_fat-tree"
    assert calls == [(f"packet-real/{point}", ())] + [
        (f"packet-jitter/{point}/seed{s}", ("packet.start_jitter_ns=180", f"packet.start_seed={s}")) for s in (1, 2, 3)]
    row = json.load(open(tmp_path / "flow_vs_packet.json"))[0]
    assert row["packet"] == 0.0021 and row["packet_single"] == 0.0030 and row["ratio"] == 1.0
    assert row["packet_replicates"] == [0.0020, 0.0021, 0.0025]
    out = capsys.readouterr().out
    assert "the median of 3 replicates" in out and "23.8%" in out  # (0.0025 - 0.0020) / 0.0021


def test_co_scheduled_points_run_the_same_replicates_on_the_flow_engine(tmp_path, monkeypatch):
    """A co-scheduled point's flow runs draw the packet replicates' offsets (flow.start_jitter_ns and
    flow.start_seed), and their median is the flow figure; other points run the flow engine once."""
    import bench_engines
    flows = []

    def summary(t):
        return {"status": "complete", "aggregate": {"iteration_time_s_mean": t}, "model": {"events": 1,
                "collective_model": "detailed"}, "jobs": [{"collectives": [{"cct_s": t}]}], "flows": [], "queues": []}

    def fake_flow(pt, folder, sets):
        flows.append((pt["label"], os.path.relpath(folder, tmp_path), tuple(sets)))
        seed = next((int(x.split("=")[1]) for x in sets if x.startswith("flow.start_seed=")), 0)
        return summary({0: 0.0010, 1: 0.0019, 2: 0.0015, 3: 0.0020}[seed]), 0.1

    monkeypatch.setattr(fvp, "run_packet", lambda pt, folder, packet_sets=(): (summary(0.0019), 1.0, 1.0))
    monkeypatch.setattr(fvp, "run_flow", fake_flow)
    bench_engines.main(["--reference", "packet", "--out", str(tmp_path), "--only", "three jobs leaf-spine",
                        "--packet-replicates", "3"])
    co = [f for f in flows if f[0] == "three jobs leaf-spine coschedule"]
    assert [f[1] for f in co] == ["flow-real/three_jobs_leaf-spine_coschedule"] + [
        f"flow-jitter/three_jobs_leaf-spine_coschedule/seed{s}" for s in (1, 2, 3)]
    assert co[1][2][-2:] == ("flow.start_jitter_ns=180", "flow.start_seed=1")
    assert len([f for f in flows if f[0] == "three jobs leaf-spine ecmp"]) == 1
    rows = {r["label"]: r for r in json.load(open(tmp_path / "flow_vs_packet.json"))}
    assert rows["three jobs leaf-spine coschedule"]["flow"] == 0.0019  # median of 0.0019, 0.0015, 0.0020
    assert rows["three jobs leaf-spine coschedule"]["flow_single"] == 0.0010
    assert rows["three jobs leaf-spine ecmp"]["flow"] == 0.0010


@pytest.mark.parametrize("flags, says", [(["--packet-replicates", "-1"], "--packet-replicates: expected"),
                                         (["--packet-replicates", "3", "--packet-jitter-ns", "0"],
                                          "--packet-jitter-ns: expected")])
def test_bad_replicate_flags_are_one_line_errors(flags, says, capsys, monkeypatch):
    import bench_engines
    monkeypatch.setattr(fvp, "main", lambda args: pytest.fail("ran with bad flags"))
    with pytest.raises(SystemExit) as e:
        bench_engines.main(["--reference", "packet", *flags])
    assert e.value.code == 2 and says in capsys.readouterr().err
