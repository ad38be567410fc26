"""`dtnet report DIR` and `dtnet compare DIR...`: the tables, the ratios, the
summary.json contract they check, and one-line errors (exit 2) for bad folders."""
import io
import json

import pytest

from dtnet import cli
from experiment.outputs import report
from experiment.outputs.summary import print_table
from tests.unit.experiment import fakerun


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return fakerun.two_runs(tmp_path_factory.mktemp("runs"))


def test_a_run_summary_meets_the_contract(runs):
    for run_dir, _ in runs.values():
        assert report.load_summary(str(run_dir))["name"] == "fake"


@pytest.mark.parametrize("breakage,key", [
    (lambda s: s.pop("jobs"), "jobs"),
    (lambda s: s["jobs"][0]["iteration_time_s"].pop("p99"), "jobs[0].iteration_time_s.p99"),
    (lambda s: s["jobs"][0]["collectives"][0].update(busbw_gbps="fast"), "jobs[0].collectives[0].busbw_gbps"),
    (lambda s: s["fidelity"].update(ok=1), "fidelity.ok"),
])
def test_contract_check_names_the_broken_key(runs, breakage, key):
    s = json.loads((runs["fast"][0] / "summary.json").read_text())
    breakage(s)
    with pytest.raises(cli.InputError) as ei:
        report.check_contract(s)
    assert ei.value.key == key


def _cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_report_prints_the_run_tables_and_links(runs, capsys):
    run_dir, summary = runs["fast"]
    rc, out, err = _cli(capsys, "report", str(run_dir))
    assert rc == 0 and err == ""
    expected = io.StringIO()
    print_table(summary, expected)
    assert expected.getvalue() in out
    assert "h0 -> s0" in out and "s0 -> h1" in out and "h2 -> s0" not in out  # idle links left out
    assert "trace.json" in out and "plots/link_heatmap.png" in out


def test_report_shows_each_collective_against_its_alpha_beta_prediction(runs, capsys, tmp_path):
    run_dir, summary = runs["fast"]
    c = summary["jobs"][0]["collectives"][0]
    # 2.03 s emulated against the plan's model of a 4-rank ring of 1 GiB at 10 Mb/s (~0.64 s).
    assert c["cct_vs_predicted"] == pytest.approx(c["cct_s"] / c["predicted_cct_s"]) and c["cct_vs_predicted"] > 1
    assert summary["aggregate"]["cct_vs_predicted_mean"] == pytest.approx(c["cct_vs_predicted"])
    assert summary["prediction"]["latency_s"] == 0 and summary["prediction"]["pipeline_slice_bytes"] > 0
    rc, out, _ = _cli(capsys, "report", str(run_dir))
    (line,) = [x for x in out.splitlines() if x.strip().startswith("all_reduce")]
    assert "alpha-beta" in out and line.endswith(f"{c['cct_vs_predicted']:.2f}")
    # A summary from before the prediction existed still reports, without those columns.
    old = tmp_path / "old"
    old.mkdir()
    s = json.loads((run_dir / "summary.json").read_text())
    for job in s["jobs"]:
        for coll in job["collectives"]:
            coll.pop("predicted_cct_s"), coll.pop("cct_vs_predicted")
    (old / "summary.json").write_text(json.dumps(s))
    rc, out, err = _cli(capsys, "report", str(old))
    assert rc == 0 and err == "" and "alpha-beta" not in out and "busbw Gb/s" in out


def test_compare_puts_runs_side_by_side_with_ratios(runs, capsys, tmp_path):
    chart = tmp_path / "cmp.png"
    rc, out, err = _cli(capsys, "compare", str(runs["fast"][0]), str(runs["slow"][0]), "--plot", str(chart))
    assert rc == 0 and err == ""
    def row(label):
        (line,) = [x for x in out.splitlines() if x.strip().startswith(label)][:1]
        return line

    assert "(2.00x)" in row("iteration time mean") and "(2.00x)" in row("cct mean")
    assert "(0.50x)" in row("busbw Gb/s") and "(0.50x)" in row("normalized throughput")
    assert "all_reduce 1 GiB x4 (ring)" in out and "job b" in out
    assert "(2.00x)" in row("cct / alpha-beta")  # the same model, a run twice as slow
    assert fakerun.is_png(chart)


def _one_line_error(capsys, argv, *needles):
    rc, out, err = _cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    for n in needles:
        assert n in err
    return err


def test_report_of_a_bad_folder_is_a_one_line_input_error(tmp_path, capsys, runs):
    _one_line_error(capsys, ["report", str(tmp_path / "none")], str(tmp_path / "none"))
    _one_line_error(capsys, ["report", str(tmp_path)], str(tmp_path / "summary.json"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text("{not json")
    _one_line_error(capsys, ["report", str(bad)], str(bad / "summary.json"), "valid JSON")
    s = json.loads((runs["fast"][0] / "summary.json").read_text())
    del s["jobs"][0]["collectives"][0]["busbw_gbps"]
    (bad / "summary.json").write_text(json.dumps(s))
    _one_line_error(capsys, ["report", str(bad)], "jobs[0].collectives[0].busbw_gbps")
    (bad / "summary.json").write_text((runs["fast"][0] / "summary.json").read_text())
    (bad / "links.csv").write_text("time,link\n1,x\n")
    _one_line_error(capsys, ["report", str(bad)], str(bad / "links.csv"))


def test_compare_needs_two_good_folders(tmp_path, capsys, runs):
    _one_line_error(capsys, ["compare", str(runs["fast"][0])], "two run folders")
    _one_line_error(capsys, ["compare", str(runs["fast"][0]), str(tmp_path)], str(tmp_path / "summary.json"))


def test_help_lists_report_and_compare(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "report" in out and "compare" in out


@pytest.mark.parametrize("engine", ["flow", "packet"])
def test_a_models_run_is_named_by_its_engine_beside_the_emulators(runs, capsys, tmp_path, engine):
    """compare and report name each model engine, and judge no emulator fidelity for it."""
    import shutil
    model_run = tmp_path / engine
    shutil.copytree(runs["fast"][0], model_run)
    s = json.loads((model_run / "summary.json").read_text())
    s["engine"] = engine
    (model_run / "summary.json").write_text(json.dumps(s))
    rc, out, _ = _cli(capsys, "compare", str(runs["fast"][0]), str(model_run))
    assert rc == 0 and f"engine {engine}, complete" in out and f"model ({engine})" in out
    rc, out, _ = _cli(capsys, "report", str(model_run))
    assert rc == 0 and f"engine {engine} (real-cluster units)" in out


def test_compare_and_report_say_which_code_made_each_run(runs, capsys, tmp_path):
    """Two runs of one engine by different code: compare says so; report names the code."""
    import shutil
    from experiment import provenance
    here = provenance.source("emulate")
    made = {}
    for name, fp in (("now", here["fingerprint"]), ("same", here["fingerprint"]), ("older", "ab" * 32),
                     ("unknown", None)):
        made[name] = tmp_path / name
        shutil.copytree(runs["fast"][0], made[name])
        s = json.loads((made[name] / "summary.json").read_text())
        s.pop("source", None)
        if fp:
            s["source"] = {"fingerprint": fp, "packages": here["packages"]}
        (made[name] / "summary.json").write_text(json.dumps(s))
    rc, out, _ = _cli(capsys, "compare", str(made["now"]), str(made["same"]), str(made["unknown"]))
    code_row = next(x for x in out.splitlines() if x.strip().startswith("code"))
    assert rc == 0 and here["fingerprint"][:12] in code_row and "unknown" in code_row
    assert "different code" not in out  # the run that cannot tell is not counted against the others
    rc, out, _ = _cli(capsys, "compare", str(made["now"]), str(made["older"]))
    assert rc == 0 and "note: [1], [2] ran the emulate engine on different code" in out
    rc, out, _ = _cli(capsys, "report", str(made["older"]))
    assert rc == 0 and "code abababababab (summary.json source" in out
    rc, out, _ = _cli(capsys, "report", str(made["unknown"]))
    assert rc == 0 and "code unknown (made before summary.json had source)" in out
    # Summaries without an engine (older runs) or with a malformed source compare, not crash.
    for name, edit in (("noengine", lambda s: s.pop("engine", None)), ("badsource", lambda s: s.update(source="x"))):
        made[name] = tmp_path / name
        shutil.copytree(made["now"], made[name])
        s = json.loads((made[name] / "summary.json").read_text())
        edit(s)
        (made[name] / "summary.json").write_text(json.dumps(s))
    rc, out, err = _cli(capsys, "compare", str(made["older"]), str(made["noengine"]), str(made["badsource"]))
    assert rc == 0 and err == "" and "note: [1], [2] ran the emulate engine on different code" in out
