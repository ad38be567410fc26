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


def test_packet_real_runs_each_point_in_real_units_and_sets_the_units_beside_the_flow_engine(tmp_path, monkeypatch,
                                                                                            capsys):
    """--engines packet-real: one real-unit packet run per point (seed 0, --packet-set passed to it),
    the emulated run over it (what the emulator's units do) and the flow engine's seed 0 over it."""
    calls = []

    def summary(t):
        return {"status": "complete", "aggregate": {"iteration_time_s_mean": t}, "model": {"run_s": 0.1,
                "collective_model": "detailed"}, "jobs": [{"collectives": [{"cct_s": t}]}], "flows": [], "queues": []}

    def fake_run_packet(pt, folder, seed=0, units="emulated", extra=()):
        calls.append((units, os.path.basename(os.path.dirname(folder)), extra))
        return summary(0.020 if units == "real" else 0.015), 1.0, None

    monkeypatch.setattr(bench_engines, "run_packet", fake_run_packet)
    monkeypatch.setattr(bench_engines, "run_flow", lambda pt, folder, seed, extra=(): (summary(0.018), 0.5))
    assert bench_engines.main(["--engines", "flow,packet,packet-real", "--out", str(tmp_path), "--only",
                               "ring 256MiB single-switch", "--packet-set", "transport.tcp.tail_loss_probe=true"]) == 0
    assert calls == [("emulated", "packet", ()), ("real", "packet-real", ("transport.tcp.tail_loss_probe=true",))]
    row = json.load(open(tmp_path / "bench_engines.json"))[0]
    assert row["packet_real"] == 0.020
    assert abs(row["units_effect"] - 0.75) < 1e-12 and abs(row["flow_real_ratio"] - 0.9) < 1e-12
    assert "packet emulated / real 0.750  flow / packet real 0.900" in capsys.readouterr().out


def test_the_units_verdict_judges_the_flow_engine_only_where_the_emulators_units_stay_near_real_units(capsys):
    """A point the emulator's units move by more than UNITS_NEAR is left out of the flow / emulator
    figure taken where the emulator can judge; one within it is counted."""
    def row(label, ratio, units):
        return {"label": label, "ratio": ratio, "faithful": True, "figure": "cct", "units_effect": units,
                "flow_real_ratio": 1.0}
    bench_engines._units_verdict([row("near", 1.2, 0.95), row("far", 1.0, 0.5)])
    out = capsys.readouterr().out
    assert "move the point 10% or less: 1 points; median 20.0%, p90 20.0%" in out
    assert "flow / emulator 1.200: near: packet emulated / real 0.950, flow / packet real 1.000" in out


def test_emulator_replicates_take_the_median_of_the_faithful_runs(tmp_path, monkeypatch, capsys):
    """--emulate-replicates 3: three emulator runs per point, the first in DIR/emulate/<point> and the
    others in DIR/emulate-repR/<point>; an unfaithful run is shown but left out of the median, and the
    verdict against the first run alone is printed beside the median's."""
    figures = iter([0.010, 0.014, 0.012])
    faithful = iter([True, False, True])
    folders = []

    def fake_run_emulator(pt, folder):
        folders.append(os.path.relpath(folder, tmp_path))
        t = next(figures)
        return {"status": "complete", "fidelity": {"ok": next(faithful)}, "jobs": [{"collectives": [{"cct_s": t}]}],
                "aggregate": {"iteration_time_s_mean": t}}, 2.0

    def summary(t):
        return {"status": "complete", "aggregate": {"iteration_time_s_mean": t}, "model": {"run_s": 0.1,
                "collective_model": "detailed"}, "jobs": [{"collectives": [{"cct_s": t}]}]}

    monkeypatch.setattr(bench_engines, "run_emulator", fake_run_emulator)
    monkeypatch.setattr(bench_engines, "run_flow", lambda pt, folder, seed, extra=(): (summary(0.0121), 0.5))
    assert bench_engines.main(["--engines", "emulate,flow", "--out", str(tmp_path), "--only",
                               "ring 256MiB single-switch", "--emulate-replicates", "3"]) == 0
    slug = "all_reduce_ring_256MiB_single-switch"
    assert folders == [f"emulate/{slug}", f"emulate-rep1/{slug}", f"emulate-rep2/{slug}"]
    row = json.load(open(tmp_path / "bench_engines.json"))[0]
    assert row["emulator"] == 0.011 and row["faithful"] and row["emulator_run0"] == 0.010
    assert row["emulator_runs"] == [[0.010, True], [0.014, False], [0.012, True]]
    out = capsys.readouterr().out
    assert "10.00 ms, 14.00 ms (unfaithful), 12.00 ms" in out
    assert "|ratio - 1| median 10.0%" in out and "first emulator run alone: 1 points; median 21.0%" in out


def test_a_point_with_most_runs_unfaithful_is_not_judged():
    assert bench_engines.emulator_reference([(1.0, False), (2.0, False), (3.0, True)]) == (
        3.0, False, [[1.0, False], [2.0, False], [3.0, True]])
    assert bench_engines.emulator_reference([(1.0, False)]) == (1.0, False, [[1.0, False]])
    assert bench_engines.emulator_reference([]) == (None, False, [])


def test_bad_emulator_replicates_is_a_one_line_error(capsys):
    import pytest
    with pytest.raises(SystemExit) as e:
        bench_engines.main(["--emulate-replicates", "0"])
    assert e.value.code == 2
    assert "--emulate-replicates: expected an integer >= 1, found 0" in capsys.readouterr().err


def test_multi_job_points_also_compare_the_first_iteration(tmp_path, monkeypatch, capsys):
    """A contended iteration point prints the jobs' mean first iteration on both engines (the
    emulator's median over its faithful runs, the flow engine's over its seeds) and their ratio."""
    def summary(first, rest, ok=True):
        jobs = [{"iteration_time_s": {"all": [first, rest, rest]}, "breakdown_s": {}} for _ in range(2)]
        return {"status": "complete", "fidelity": {"ok": ok}, "jobs": jobs,
                "aggregate": {"iteration_time_s_mean": (first + 2 * rest) / 3},
                "model": {"run_s": 0.1, "collective_model": "detailed"}}
    emus = iter([summary(0.034, 0.030), summary(0.036, 0.030), summary(0.050, 0.030, ok=False)])
    monkeypatch.setattr(bench_engines, "run_emulator", lambda pt, folder: (next(emus), 2.0))
    monkeypatch.setattr(bench_engines, "run_flow", lambda pt, folder, seed, extra=(): (summary(0.035, 0.035), 0.5))
    assert bench_engines.main(["--engines", "emulate,flow", "--out", str(tmp_path), "--only",
                               "two jobs rail congestion-aware", "--emulate-replicates", "3", "--seeds", "2"]) == 0
    row = json.load(open(tmp_path / "bench_engines.json"))[0]
    assert abs(row["emulator_first_iter"] - 0.035) < 1e-12 and abs(row["flow_first_iter"] - 0.035) < 1e-12
    assert abs(row["first_iter_ratio"] - 1.0) < 1e-12
    out = capsys.readouterr().out
    assert "first iteration (jobs still in phase)" in out
    assert "the first collective or iteration alone (every rank and job starting in phase): 1 points; median 0.0%, " \
        "p90 0.0%; above 10%: none" in out


def test_collective_points_compare_their_first_collective_too(tmp_path, monkeypatch, capsys):
    def summary(ccts, ok=True):
        return {"status": "complete", "fidelity": {"ok": ok}, "jobs": [{"collectives": [
            {"cct_s": sum(ccts) / len(ccts), "cct_s_all": ccts}]}], "model": {"run_s": 0.1, "collective_model": "detailed"}}
    monkeypatch.setattr(bench_engines, "run_emulator", lambda pt, folder: (summary([0.010, 0.013, 0.013]), 2.0))
    monkeypatch.setattr(bench_engines, "run_flow", lambda pt, folder, seed, extra=(): (summary([0.0088, 0.0088]), 0.5))
    assert bench_engines.main(["--engines", "emulate,flow", "--out", str(tmp_path), "--only",
                               "all_reduce direct 256MiB single-switch"]) == 0
    row = json.load(open(tmp_path / "bench_engines.json"))[0]
    assert abs(row["first_iter_ratio"] - 0.88) < 1e-9 and abs(row["ratio"] - 0.0088 / 0.012) < 1e-9
    assert "above 10%: all_reduce direct 256MiB single-switch 0.880" in capsys.readouterr().out


def test_first_iteration_is_none_without_per_iteration_times():
    assert bench_engines.first_iteration({"jobs": [{"iteration_time_s": 0.03}]}) is None
    assert bench_engines.first_figure("throughput", {"jobs": []}) is None
    assert bench_engines.first_figure("cct", {"jobs": [{"collectives": []}]}) is None
    assert bench_engines.first_iteration({"jobs": [{"iteration_time_s": {"all": [0.02, 0.01]}},
                                                   {"iteration_time_s": {"all": [0.04]}}]}) == 0.03


def _finished_run(folder, source):
    """A complete emulator run of ring-single-switch.yaml as the bench leaves it."""
    import shutil
    os.makedirs(folder)
    shutil.copy(os.path.join(ROOT, "experiments", "ring-single-switch.yaml"), os.path.join(folder, "config.yaml"))
    s = {"status": "complete", "fidelity": {"ok": True}}
    if source is not None:
        s["source"] = {"fingerprint": source, "packages": []}
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(s, f)


def test_a_finished_run_is_reused_only_when_the_code_at_hand_made_it(tmp_path, monkeypatch):
    from experiment import provenance
    monkeypatch.setattr(bench_engines, "STALE", [])
    monkeypatch.setattr(bench_engines, "UNKNOWN_SOURCE", [])
    path = os.path.join(ROOT, "experiments", "ring-single-switch.yaml")
    here = provenance.source("emulate")["fingerprint"]
    for name, src in (("same", here), ("other", "0" * 64), ("unknown", None)):
        _finished_run(str(tmp_path / name), src)
    assert bench_engines._complete(str(tmp_path / "same"), [], path)["source"]["fingerprint"] == here
    assert bench_engines._complete(str(tmp_path / "other"), [], path) is None
    assert bench_engines.STALE == [str(tmp_path / "other")]
    assert bench_engines._complete(str(tmp_path / "unknown"), [], path) is not None  # said at the end
    assert bench_engines.UNKNOWN_SOURCE == [str(tmp_path / "unknown")]
    # The packet engine's fingerprint is another: the emulator's run is not the packet engine's.
    assert bench_engines._complete(str(tmp_path / "same"), [], path, engine="packet") is None


def test_the_bench_names_the_runs_other_code_made(capsys, monkeypatch):
    monkeypatch.setattr(bench_engines, "STALE", ["DIR/emulate/a"])
    monkeypatch.setattr(bench_engines, "UNKNOWN_SOURCE", ["DIR/emulate/b", "DIR/emulate/c"])
    bench_engines._source_notes()
    out = capsys.readouterr().out
    assert "1 finished run(s) came from other code" in out and "DIR/emulate/a" in out
    assert "2 reused run(s) do not say what code made them" in out


def test_a_finished_run_not_reused_is_kept_aside_not_overwritten(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_engines, "SET_ASIDE", [])
    folder = str(tmp_path / "point")
    bench_engines._set_aside(folder)  # nothing there: nothing to do
    assert bench_engines.SET_ASIDE == [] and not os.path.exists(folder)
    for n in (1, 2):
        _finished_run(folder, "0" * 64)
        bench_engines._set_aside(folder)
        assert not os.path.exists(folder)
        assert json.load(open(os.path.join(f"{folder}.old{n}", "summary.json")))["status"] == "complete"
    os.makedirs(folder)  # an unfinished run stays where it is (the run resumes or redoes it)
    bench_engines._set_aside(folder)
    assert os.path.isdir(folder) and bench_engines.SET_ASIDE == [f"{folder}.old1", f"{folder}.old2"]
