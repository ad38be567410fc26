"""Sweeps without root: points expand like --set, run into their folders, resume, and stop cleanly."""
import csv
import io
import json
import os

import pytest
import yaml

from badinput import InputError
from dtnet import cli
from experiment import model, sweep
from experiment.engine import Interrupted, RunFailure

BASE = {
    "name": "sw",
    "topology": {"kind": "single-switch", "hosts": 4},
    "scale": {"link": 2.5e-5, "bytes": 1e-3},
    "jobs": [{"name": "j0", "hosts": "all",
              "workload": {"collective": "all_reduce", "size_bytes": 1 << 20, "iterations": 1}}],
}
GRID = {"grid": {"controller.routing": ["ecmp", "shortest"], "jobs.0.workload.size_bytes": [1048576, 2097152]}}


def _exp(sw, tmp_path=None, **extra):
    data = {**json.loads(json.dumps(BASE)), **extra, "sweep": sw}
    if tmp_path is None:
        return model.parse(data, "s.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return model.load(str(path))


def test_grid_expands_to_every_combination_like_set():
    points = sweep.expand(_exp(GRID))
    assert [p.slug for p in points] == ["routing=ecmp,size_bytes=1048576", "routing=ecmp,size_bytes=2097152",
                                        "routing=shortest,size_bytes=1048576", "routing=shortest,size_bytes=2097152"]
    assert [(p.exp.routing, p.exp.jobs[0].workload["size_bytes"]) for p in points] == \
        [("ecmp", 1048576), ("ecmp", 2097152), ("shortest", 1048576), ("shortest", 2097152)]
    assert all(not p.exp.sweep for p in points)


def test_point_values_read_numbers_like_set():
    (p,) = sweep.expand(_exp({"list": [{"scale.link": "1.25e-5"}]}))  # YAML 1.1 reads 1.25e-5 as a string
    assert p.exp.scale.link == 1.25e-5


def test_list_points_may_set_different_keys_and_whole_mappings():
    points = sweep.expand(_exp({"list": [
        {"controller.routing": "ecmp"},
        {"controller.routing": "shortest", "jobs.0.hosts": {"count": 2, "placement": "spread"}}]}))
    assert points[1].slug == "routing=shortest,hosts=count_2_placement_spread"
    assert points[1].exp.jobs[0].hosts == {"count": 2, "placement": "spread"}
    assert points[0].exp.jobs[0].hosts == "all"


def test_slugs_use_the_shortest_distinct_key_suffix_and_stay_unique():
    pts = [(("jobs.0.workload.size_bytes", 1), ("jobs.1.workload.size_bytes", 2)),
           (("jobs.0.workload.size_bytes", 1), ("jobs.1.workload.size_bytes", "a/b c"))]
    assert sweep.slugs(pts) == ["0.workload.size_bytes=1,1.workload.size_bytes=2",
                                "0.workload.size_bytes=1,1.workload.size_bytes=a_b_c"]
    assert len(set(sweep.slugs([(("k", "a b"),), (("k", "a_b"),)]))) == 2
    assert len(sweep.slugs([(("k", "x" * 300),)])[0]) <= sweep.MAX_SLUG


def test_the_resolved_sweep_round_trips():
    exp = _exp(GRID)
    back = model.parse(model.to_dict(exp), "s.yaml")
    assert back == exp and len(back.sweep) == 4


@pytest.mark.parametrize("sw,key", [
    ({"grid": {"controller.routing": []}}, "sweep.grid.controller.routing"),
    ({"grid": {"sweep.grid": [1]}}, "sweep.grid.sweep.grid"),
    ({"list": [{}]}, "sweep.list[0]"),
    ({"grid": {"a": [1]}, "list": [{"a": 1}]}, "sweep"),
    ({"matrix": {}}, "sweep.matrix"),
    ({"list": [{"controller.routing": "ecmp"}, {"controller.routing": "ecmp"}]}, "sweep"),
])
def test_bad_sweeps_name_the_key(sw, key):
    with pytest.raises(InputError) as e:
        _exp(sw)
    assert str(e.value).startswith(f"s.yaml: {key}:")


def test_a_bad_point_is_named_before_anything_runs():
    exp = _exp({"grid": {"controller.routing": ["ecmp", "fastest"]}})
    with pytest.raises(InputError) as e:
        sweep.expand(exp)
    assert str(e.value).startswith("s.yaml: sweep point 1 (routing=fastest): controller.routing: expected one of")
    exp = _exp({"list": [{"jobs.0.workload.collective": "all_reduce"}, {"jobs.0.workload.collective": "gossip"}]})
    with pytest.raises(InputError) as e:
        sweep.check(sweep.expand(exp))
    assert "sweep point 1 (collective=gossip): jobs[0].workload" in str(e.value) and "found gossip" in str(e.value)


def _summary(exp, status="complete"):
    size = exp.jobs[0].workload["size_bytes"]
    return {"name": exp.name, "status": status, "error": None,
            "jobs": [{"name": "j0", "ranks": 4, "iterations": 1,
                      "iteration_time_s": {"mean": size / 1e9, "p50": 0, "p99": 0, "all": [size / 1e9]},
                      "collectives": [{"op": "all_reduce", "algorithm": "ring", "size_bytes": size, "ranks": 4,
                                       "count": 1, "cct_s": 0.1, "cct_s_all": [0.1], "algbw_gbps": 10.0,
                                       "busbw_gbps": 15.0 if exp.routing == "ecmp" else 12.0,
                                       "predicted_cct_s": 0.05, "cct_vs_predicted": 2.0}]}],
            "aggregate": {"iteration_time_s_mean": size / 1e9, "busbw_gbps_mean": 15.0,
                          "cct_vs_predicted_mean": 2.0},
            "traffic": {"aggregate_gbps": 100.0, "normalized_throughput": 0.5},
            "fidelity": {"ok": True, "checks": []}, "controller": {}, "tcp": {"retrans_segs": 3}}


class FakeRunner:
    """run_experiment's folder writes without a testbed; interrupts or fails on request."""

    def __init__(self, interrupt_at=None, fail_at=None):
        self.calls, self.interrupt_at, self.fail_at = [], interrupt_at, fail_at

    def __call__(self, exp, folder):
        self.calls.append(os.path.basename(folder))
        os.makedirs(folder, exist_ok=True)
        model.write_resolved(exp, os.path.join(folder, "config.yaml"))
        n = len(self.calls)
        status = "incomplete" if n in (self.interrupt_at, self.fail_at) else "complete"
        with open(os.path.join(folder, "summary.json"), "w") as f:
            json.dump(_summary(exp, status), f)
        if n == self.interrupt_at:
            raise Interrupted("SIGINT")
        if n == self.fail_at:
            raise RunFailure("agent j0/rank 1 exited")
        return _summary(exp)


def _csv(out):
    with open(out / "sweep.csv") as f:
        return list(csv.DictReader(f))


def test_a_point_other_code_made_is_kept_aside_and_measured_again(tmp_path):
    from experiment import provenance
    exp, out = _exp(GRID, tmp_path), tmp_path / "out"
    sweep.run(exp, str(out), FakeRunner(), log=lambda m: None)
    slugs = sweep.slugs(list(exp.sweep))
    here = provenance.source(exp.engine)
    for i, slug in enumerate(slugs):  # as runs of today's code would say, but the first from other code
        path = out / "points" / slug / "summary.json"
        s = json.load(open(path))
        s["source"] = {"fingerprint": "0" * 64, "packages": []} if i == 0 else here
        json.dump(s, open(path, "w"))
    again, lines = FakeRunner(), []
    done = sweep.run(model.load(str(tmp_path / "s.yaml")), str(out), again, log=lines.append)
    assert again.calls == slugs[:1] and done["skipped"] == slugs[1:]
    assert any("other code" in ln and f"{slugs[0]}.old1" in ln for ln in lines)
    kept = json.load(open(out / "points" / f"{slugs[0]}.old1" / "summary.json"))
    assert kept["source"]["fingerprint"] == "0" * 64  # nothing measured is lost
    assert [r["status"] for r in _csv(out)] == ["complete"] * 4 and len(_csv(out)) == 4


def test_an_interrupted_sweep_keeps_its_csv_and_resumes_where_it_stopped(tmp_path):
    exp, out = _exp(GRID, tmp_path), tmp_path / "out"
    first = FakeRunner(interrupt_at=2)
    with pytest.raises(Interrupted):
        sweep.run(exp, str(out), first, log=lambda m: None)
    assert len(first.calls) == 2
    rows = _csv(out)
    assert [r["status"] for r in rows] == ["complete", "interrupted", "pending", "pending"]
    assert rows[0]["controller.routing"] == "ecmp" and rows[0]["jobs.0.workload.size_bytes"] == "1048576"
    assert float(rows[0]["j0.iteration_time_s_mean"]) == pytest.approx(1048576 / 1e9)
    assert rows[0]["j0.all_reduce.busbw_gbps"] == "15.0" and rows[0]["fidelity_ok"] == "true"
    assert rows[0]["j0.all_reduce.predicted_cct_s"] == "0.05" and rows[0]["j0.all_reduce.cct_vs_predicted"] == "2.0"
    assert rows[0]["cct_vs_predicted_mean"] == "2.0"
    assert rows[2]["j0.iteration_time_s_mean"] == ""

    again, lines = FakeRunner(), []
    done = sweep.run(model.load(str(tmp_path / "s.yaml")), str(out), again, log=lines.append)
    assert again.calls == sweep.slugs(list(exp.sweep))[1:]  # the complete point is skipped, the interrupted re-run
    assert done["skipped"] == ["routing=ecmp,size_bytes=1048576"] and done["failed"] == []
    assert any("skipped" in ln and "routing=ecmp,size_bytes=1048576" in ln for ln in lines)
    assert any(ln.startswith("[sweep] [####################] 4/4") for ln in lines)
    assert [r["status"] for r in _csv(out)] == ["complete"] * 4
    assert (out / "sweep.png").exists()
    assert model.load(str(out / "config.yaml")).sweep == exp.sweep  # the sweep as run, resumable from there


def test_a_failed_point_does_not_stop_the_sweep_and_runs_again_next_time(tmp_path):
    exp, out = _exp(GRID, tmp_path), tmp_path / "out"
    done = sweep.run(exp, str(out), FakeRunner(fail_at=3), log=lambda m: None)
    assert done["complete"] == 3 and done["failed"] == ["routing=shortest,size_bytes=1048576"]
    row = _csv(out)[2]
    assert row["status"] == "failed" and "exited" in row["error"]
    again = FakeRunner()
    sweep.run(exp, str(out), again, log=lambda m: None)
    assert again.calls == ["routing=shortest,size_bytes=1048576"]


def test_a_point_whose_experiment_changed_runs_again(tmp_path):
    exp, out = _exp(GRID, tmp_path), tmp_path / "out"
    sweep.run(exp, str(out), FakeRunner(), log=lambda m: None)
    changed = model.load(str(tmp_path / "s.yaml"), ["scale.link=1.25e-5"])
    again = FakeRunner()
    sweep.run(changed, str(out), again, log=lambda m: None)
    assert len(again.calls) == 4


def test_dtnet_check_validates_every_point(tmp_path, capsys):
    _exp(GRID, tmp_path)
    assert cli.main(["check", str(tmp_path / "s.yaml")]) == 0
    assert "a sweep of 4 points, each valid" in capsys.readouterr().out
    _exp({"grid": {"jobs.0.hosts": [{"count": 2}, {"count": 5}]}}, tmp_path)
    assert cli.main(["check", str(tmp_path / "s.yaml")]) == 2
    assert "sweep point 1 (hosts=count_5): jobs[0].hosts.count: expected an integer in 1..4" in capsys.readouterr().err
    _exp({"grid": {"name.x": [1]}}, tmp_path)
    assert cli.main(["check", str(tmp_path / "s.yaml")]) == 2
    assert "sweep point 0 (x=1): name.x: expected a mapping" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["sweep-routing", "collectives-rail", "collectives-fat-tree", "moe-a2a-rail",
                                  "moe-a2a-fat-tree"])
def test_the_example_sweeps_are_valid(name):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "experiments", f"{name}.yaml")
    points = sweep.expand(model.load(path))
    sweep.check(points)
    assert len(points) >= 2


def test_the_table_gives_each_point_its_speedup_over_the_first():
    import io

    rows = [{"point": "ecmp", "status": "complete", "iteration_time_s_mean": 0.03, "busbw_gbps_mean": 100.0,
             "normalized_throughput": 0.5, "fidelity_ok": True},
            {"point": "cosched", "status": "complete", "iteration_time_s_mean": 0.02, "busbw_gbps_mean": 150.0,
             "normalized_throughput": 0.7, "fidelity_ok": False},
            {"point": "broken", "status": "failed"}]
    out = io.StringIO()
    sweep.print_table(rows, out)
    lines = out.getvalue().splitlines()
    assert "speedup" in lines[1]
    assert "1.00x" in lines[2] and "1.50x" in lines[3] and "NOT ok" in lines[3]
    assert lines[4].split()[:3] == ["broken", "failed", "-"]
def test_the_sweep_table_shows_the_ratio_to_alpha_beta():
    out = io.StringIO()
    sweep.print_table([{"point": "a", "status": "complete", "busbw_gbps_mean": 300.0, "cct_vs_predicted_mean": 1.25},
                       {"point": "b", "status": "failed"}], out)
    header, a, b = out.getvalue().strip().splitlines()
    assert "vs alpha-beta" in header and "1.25" in a and b.split()[2:] == ["-"] * 6


def test_a_sweep_over_sizes_is_drawn_as_lines_along_the_size(tmp_path):
    sizes = [1 << 20, 1 << 24, 1 << 28]
    exp, out = _exp({"grid": {"controller.routing": ["ecmp", "shortest"], "jobs.0.workload.size_bytes": sizes}},
                    tmp_path), tmp_path / "out"
    points = sweep.expand(exp)
    assert sweep.numeric_key(points) == "jobs.0.workload.size_bytes"
    lines = sweep.series(points, [_summary(p.exp) for p in points], "jobs.0.workload.size_bytes")
    assert list(lines) == ["routing=ecmp", "routing=shortest"]
    assert lines["routing=ecmp"] == [(s, 15.0, 2.0) for s in sizes]
    sweep.run(exp, str(out), FakeRunner(), log=lambda m: None)
    with open(out / "sweep.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # No numeric key that varies: no line to draw; the runs go side by side instead.
    assert sweep.numeric_key(sweep.expand(_exp({"grid": {"controller.routing": ["ecmp", "shortest"]}}))) is None
    assert sweep.numeric_key(sweep.expand(_exp(GRID))) == "jobs.0.workload.size_bytes"


def test_report_on_a_sweep_folder_prints_the_sweep_table_again(tmp_path, capsys):
    exp, out = _exp(GRID, tmp_path), tmp_path / "out"
    done = sweep.run(exp, str(out), FakeRunner(fail_at=2), log=lambda m: None)
    at_end = io.StringIO()
    sweep.print_table(done["rows"], at_end)
    assert cli.main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"sweep {out}: 4 points, 3 complete\n")
    assert at_end.getvalue() in printed and "NOT ok" not in printed and "failed" in printed
    (out / "sweep.csv").write_text("not,a,sweep\n")
    assert cli.main(["report", str(out)]) == 2
    assert "sweep.csv: expected the table `dtnet run` writes for a sweep" in capsys.readouterr().err


def test_a_sweep_without_plots_draws_no_sweep_png(tmp_path):
    exp, out = _exp(GRID, tmp_path, outputs={"plots": False}), tmp_path / "out"
    done = sweep.run(exp, str(out), FakeRunner(), log=lambda m: None)
    assert done["complete"] == 4 and all(p.exp.outputs.plots is False for p in sweep.expand(exp))
    assert (out / "sweep.csv").exists() and not (out / "sweep.png").exists()
