"""`dtnet run --auto-scale` without root: the ladder, the choice, the probes' experiments and the
record, with a fake run function standing in for the testbed."""
import io
import json
import os
from types import SimpleNamespace

import pytest
import yaml

from dtnet import cli
from emulator.run import autoscale
from experiment import model
from experiment.engine import Interrupted, RunFailure
from experiment.outputs.summary import print_calibration
from traffic.trace import Op, Trace, dump, first_iterations
from traffic.workload import single_collective

GIB = 1 << 30
EXPERIMENT = {
    "name": "as",
    "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
    "scale": {"link": 2.5e-5, "bytes": 1e-3},  # 10 Mb/s, dilation 40
    "jobs": [{"name": "j0", "hosts": "all",
              "workload": {"collective": "all_reduce", "size_bytes": GIB, "iterations": 10}}],
}


def _exp(data=None, **changes):
    d = json.loads(json.dumps(data or EXPERIMENT))
    d.update(changes)
    return model.parse(d, "as.yaml")


# -- the ladder, with probes that are faithful up to a rung ------------------------------------

def _probe_upto(last_ok_rung, not_cpu=()):
    """Faithful up to last_ok_rung; above it short of CPU, except the rungs in not_cpu (say, lateness)."""
    tried = []

    def probe(rung):
        tried.append(rung)
        ok = rung <= last_ok_rung and rung not in not_cpu
        return SimpleNamespace(rung=rung, ok=ok, cpu_bound=not ok and rung not in not_cpu)
    return probe, tried


@pytest.mark.parametrize("last_ok, expect_tried, stopped", [
    (0, [0, 1], autoscale.STOP_UNFAITHFUL),          # configured scale is the largest faithful
    (1, [0, 1, 2], autoscale.STOP_UNFAITHFUL),       # one doubling more
    (9, [0, 1, 2, 3], autoscale.STOP_LIMIT),          # faithful all the way: 4 probes, no more
    (-1, [0, -1], autoscale.STOP_FAITHFUL),           # halve once
    (-3, [0, -1, -2, -3], autoscale.STOP_FAITHFUL),   # the fourth probe finds it
    (-9, [0, -1, -2, -3], autoscale.STOP_LIMIT),      # none faithful within the limit
])
def test_ladder_goes_up_while_faithful_and_down_until_faithful(last_ok, expect_tried, stopped):
    probe, tried = _probe_upto(last_ok)
    probes, why = autoscale.search(probe, valid=lambda r: True)
    assert tried == expect_tried and [p.rung for p in probes] == expect_tried and why == stopped


@pytest.mark.parametrize("last_ok, not_cpu, expect_tried, stopped", [
    (9, (0,), [0, 1, 2, 3], autoscale.STOP_LIMIT),        # lateness at the start, CPU to spare: go up
    (1, (0,), [0, 1, 2], autoscale.STOP_UNFAITHFUL),      # ... to the largest faithful
    (-9, (0,), [0, 1], autoscale.STOP_UNFAITHFUL),        # ... and stop at a failure for lack of CPU
    (9, (0, 1), [0, 1, 2, 3], autoscale.STOP_LIMIT),      # not yet faithful: keep going up
    (-9, (-1,), [0, -1, -2, -3], autoscale.STOP_LIMIT),   # going down, other failures change nothing
])
def test_a_first_probe_failing_for_a_reason_other_than_cpu_sends_the_ladder_up(last_ok, not_cpu, expect_tried,
                                                                                stopped):
    probe, tried = _probe_upto(last_ok, not_cpu)
    _, why = autoscale.search(probe, valid=lambda r: True)
    assert tried == expect_tried and why == stopped


def test_ladder_stops_at_a_rung_out_of_range():
    probe, tried = _probe_upto(9)
    _, why = autoscale.search(probe, valid=lambda r: r <= 1)
    assert tried == [0, 1] and why == autoscale.STOP_RANGE


def _p(link, status="complete", ok=True):
    return autoscale.Probe(0, link, link * 40, link * 4e5, f"calibration/link={link:g}", status=status,
                           fidelity_ok=ok if status == "complete" else None,
                           margin_ok=True if status == "complete" else None)


def test_choice_is_the_largest_faithful_else_the_lowest_that_ran():
    assert autoscale.choose([_p(1.0), _p(2.0), _p(4.0, ok=False)]) == (_p(2.0), True)
    # Not monotonic (noise): the largest faithful one still wins.
    assert autoscale.choose([_p(1.0), _p(2.0, ok=False), _p(0.5)])[0].link == 1.0
    assert autoscale.choose([_p(1.0, ok=False), _p(0.5, ok=False), _p(0.25, status="failed")]) == (_p(0.5, ok=False),
                                                                                                     False)
    assert autoscale.choose([_p(1.0, status="failed"), _p(0.5, status="incomplete")]) == (None, False)


def test_iterations_for_a_probe():
    assert autoscale.iterations_for(1, 0.1) == 1 and autoscale.iterations_for(2, 0.1) == 2
    assert autoscale.iterations_for(10, 1.6) == 2       # ~3 s of replay, at least two iterations
    assert autoscale.iterations_for(10, 0.5) == 6
    assert autoscale.iterations_for(3, 0.01) == 3       # never more than the experiment has
    assert autoscale.iterations_for(10, 30.0) == 2      # long iterations: still two


# -- a trace cut to its first iterations ------------------------------------------------------

def test_first_iterations_cuts_whole_iterations_and_refuses_what_cannot_be_cut():
    t = single_collective({"collective": "all_reduce", "size_bytes": 1 << 20, "iterations": 5,
                           "compute_ms": 1}, 4)
    cut = first_iterations(t, 2)
    assert {o.iteration for ops in cut.ops.values() for o in ops} == {0, 1}
    assert [o.id for o in cut.ops[3]] == ["it0/compute", "it0/all_reduce", "it1/compute", "it1/all_reduce"]
    assert len(t.ops[0]) == 10  # the original is untouched
    untagged = Trace(2, {"world": [0, 1]}, {r: [Op("c", "compute", duration_s=0.1)] for r in (0, 1)})
    assert first_iterations(untagged, 1) is None
    backwards = Trace(1, {"world": [0]}, {0: [Op("b", "compute", duration_s=0.1, iteration=1),
                                             Op("a", "compute", ("b",), duration_s=0.1, iteration=0)]})
    assert first_iterations(backwards, 1) is None


# -- calibrate(), with a fake run ---------------------------------------------------------------

class FakeRun:
    """run_experiment's stand-in: faithful up to `max_ok_link`; records each experiment it ran."""

    def __init__(self, max_ok_link, fail_above=None, interrupt_at=None, late_above=None, late_below=None):
        self.max_ok_link, self.fail_above, self.interrupt_at = max_ok_link, fail_above, interrupt_at
        self.late_above = late_above  # above this link scale: lateness 17 ms, within a run's 20 but no margin
        self.late_below = late_below  # below it: lateness 25 ms, beyond a run's 20
        self.ran = []

    def __call__(self, exp, folder, log=print):
        self.ran.append((exp, folder))
        log("[run] fake")
        if self.interrupt_at is not None and len(self.ran) == self.interrupt_at:
            raise Interrupted("SIGINT")
        if self.fail_above is not None and exp.scale.link > self.fail_above:
            raise RunFailure("agents stalled")
        ok = exp.scale.link <= self.max_ok_link
        late = 0.017 if self.late_above is not None and exp.scale.link > self.late_above else 0.005
        late = 0.025 if self.late_below is not None and exp.scale.link < self.late_below else late
        checks = [{"name": "cpu", "ok": ok, "detail": "x of y seconds below 25% idle"},
                  {"name": "lateness", "ok": late <= 0.020, "detail": "late", "p99_s": late}]
        ok = ok and late <= 0.020
        return {"status": "complete", "error": None, "traffic": {"normalized_throughput": 0.98 if ok else 0.8},
                "fidelity": {"ok": ok, "checks": checks}}


def test_calibrate_probes_up_keeps_the_dilation_and_cuts_the_workload(tmp_path):
    exp = _exp()
    run = FakeRun(max_ok_link=1e-4)  # 40 Mb/s is the last faithful rung
    lines = []
    final, record = autoscale.calibrate(exp, str(tmp_path), run, log=lines.append)
    links = [e.scale.link for e, _ in run.ran]
    assert links == [2.5e-5, 5e-5, 1e-4, 2e-4]
    assert all(e.scale.dilation == pytest.approx(40) for e, _ in run.ran)
    assert all(e.jobs[0].workload["iterations"] == 3 for e, _ in run.ran)  # 1.3 s an iteration: 3 for ~3 s
    assert all(e.testbed.timeout_s == 60.0 for e, _ in run.ran)
    assert [f for _, f in run.ran] == [str(tmp_path / "calibration" / f"link={x:g}") for x in links]
    # The run itself: the whole workload at the chosen scale.
    assert (final.scale.link, final.scale.bytes) == (1e-4, 4e-3)
    assert final.jobs[0].workload["iterations"] == 10 and final.testbed.timeout_s == exp.testbed.timeout_s
    assert record["chosen"]["link"] == 1e-4 and record["faithful"] is True
    assert record["stopped"] == autoscale.STOP_UNFAITHFUL
    assert record["iterations"] == {"j0": {"probe": 3, "run": 10}}
    probes = record["probes"]
    assert [p["ok"] for p in probes] == [True, True, True, False]
    assert probes[-1]["failed_checks"] == [{"name": "cpu", "detail": "x of y seconds below 25% idle"}]
    assert probes[0]["host_link_mbps"] == pytest.approx(10) and probes[0]["normalized_throughput"] == 0.98
    saved = json.load(open(tmp_path / "calibration" / "calibration.json"))
    assert saved["probes"] == probes and saved["chosen"] == record["chosen"]
    assert open(tmp_path / "calibration" / "link=2.5e-05" / "run.log").read() == "[run] fake\n"
    assert any("probe 4: scale.link=0.0002: throughput 0.800, NOT faithful (cpu)" in ln for ln in lines)


AT_40_MBPS = {"link": 1e-4, "bytes": 4e-3}


def test_calibrate_goes_down_and_counts_a_failed_probe_as_unfaithful(tmp_path):
    run = FakeRun(max_ok_link=3e-5, fail_above=5e-5)
    final, record = autoscale.calibrate(_exp(scale=AT_40_MBPS), str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [1e-4, 5e-5, 2.5e-5]
    assert final.scale.link == 2.5e-5 and final.scale.dilation == pytest.approx(40)
    first = record["probes"][0]
    assert first["status"] == "failed" and first["error"] == "agents stalled" and first["ok"] is False


def test_calibrate_with_no_faithful_probe_runs_at_the_lowest_and_says_so(tmp_path):
    final, record = autoscale.calibrate(_exp(scale=AT_40_MBPS), str(tmp_path), FakeRun(max_ok_link=0))
    assert final.scale.link == 1e-4 / 8 and record["faithful"] is False and len(record["probes"]) == 4
    assert "no probe was faithful" in record["reason"]


def test_the_ladder_halves_no_lower_than_the_checks_can_judge(tmp_path):
    # 9000-byte frames: 3.6 Mb/s (a frame in the 20 ms lateness bound). From 10 Mb/s: 5, not 2.5.
    assert autoscale.min_link_mbps(_exp()) == pytest.approx(3.6)
    run = FakeRun(max_ok_link=0)
    final, record = autoscale.calibrate(_exp(), str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [2.5e-5, 1.25e-5] and record["stopped"] == autoscale.STOP_RANGE
    assert final.scale.link == 1.25e-5 and record["faithful"] is False
    # A configured scale below it is still probed, and the ladder may go up from there.
    run = FakeRun(max_ok_link=1)
    autoscale.calibrate(_exp(scale={"link": 2.5e-6, "bytes": 1e-4}), str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [2.5e-6, 5e-6, 1e-5, 2e-5]


def test_a_probe_must_pass_with_a_margin(tmp_path):
    # The run's bounds: lateness p99 <= 20 ms, >= 25% idle; a probe's: 15 ms, 30%.
    short = autoscale.short_of_margin({"checks": [
        {"name": "cpu", "ok": True, "detail": "", "idle_min_pct": 28.0},
        {"name": "lateness", "ok": True, "detail": "", "p99_s": 0.0152},
        {"name": "link_cap", "ok": True, "detail": ""}]})
    assert [(c["name"], c["margin"]) for c in short] == [("cpu", True), ("lateness", True)]
    assert "a probe needs <= 15 ms" in short[1]["detail"]
    assert autoscale.short_of_margin({"checks": [{"name": "cpu", "ok": True, "detail": "", "idle_min_pct": 31},
                                                 {"name": "lateness", "ok": True, "detail": "", "p99_s": 0.01}]}) == []
    run = FakeRun(max_ok_link=1, late_above=2.5e-5)
    final, record = autoscale.calibrate(_exp(), str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [2.5e-5, 5e-5] and final.scale.link == 2.5e-5
    second = record["probes"][1]
    assert second["fidelity_ok"] is True and second["margin_ok"] is False and second["ok"] is False
    assert autoscale.describe(second) == "throughput 0.980, faithful, but short of a probe's margin (lateness)"
    out = io.StringIO()
    print_calibration(record, out)
    assert "no margin" in out.getvalue() and "lateness (margin)" in out.getvalue()


def test_calibrate_goes_up_from_a_first_probe_late_with_cpu_to_spare(tmp_path):
    # 5 Mb/s late (not for lack of CPU), 10 Mb/s faithful, 20 Mb/s short of CPU: 10 it is.
    run = FakeRun(max_ok_link=2.5e-5, late_below=2e-5)
    final, record = autoscale.calibrate(_exp(scale={"link": 1.25e-5, "bytes": 5e-4}), str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [1.25e-5, 2.5e-5, 5e-5] and final.scale.link == 2.5e-5
    assert [(p["ok"], p["cpu_bound"]) for p in record["probes"]] == [(False, False), (True, False), (False, True)]


def test_calibrate_refuses_when_no_probe_runs(tmp_path):
    with pytest.raises(RunFailure, match="no probe ran to completion"):
        autoscale.calibrate(_exp(scale=AT_40_MBPS), str(tmp_path), FakeRun(max_ok_link=1, fail_above=0))
    assert len(json.load(open(tmp_path / "calibration" / "calibration.json"))["probes"]) == 4


def test_calibrate_stops_at_the_emulator_range(tmp_path):
    exp = _exp(scale={"link": 1e-3, "bytes": 0.2})  # 400 Mb/s; 1600 would exceed Mininet's 1000
    run = FakeRun(max_ok_link=1)
    final, record = autoscale.calibrate(exp, str(tmp_path), run)
    assert [e.scale.link for e, _ in run.ran] == [1e-3, 2e-3] and record["stopped"] == autoscale.STOP_RANGE


def test_an_interrupt_during_a_probe_keeps_the_record(tmp_path):
    with pytest.raises(Interrupted):
        autoscale.calibrate(_exp(), str(tmp_path), FakeRun(max_ok_link=1, interrupt_at=2))
    probes = json.load(open(tmp_path / "calibration" / "calibration.json"))["probes"]
    assert [p["status"] for p in probes] == ["complete", "interrupted"]


def test_a_new_calibration_replaces_the_old_probes(tmp_path):
    autoscale.calibrate(_exp(), str(tmp_path), FakeRun(max_ok_link=1))        # probes up to 2e-4
    autoscale.calibrate(_exp(), str(tmp_path), FakeRun(max_ok_link=2.5e-5))   # probes 2.5e-5, 5e-5
    assert sorted(os.listdir(tmp_path / "calibration")) == ["calibration.json", "link=2.5e-05", "link=5e-05"]


def test_a_trace_workload_is_cut_into_a_trace_file_of_its_own(tmp_path):
    trace = single_collective({"collective": "all_reduce", "size_bytes": GIB, "iterations": 8}, 4)
    dump(trace, tmp_path / "t.json")
    data = json.loads(json.dumps(EXPERIMENT))
    data["jobs"][0]["workload"] = {"trace": str(tmp_path / "t.json")}
    run = FakeRun(max_ok_link=2.5e-5)
    final, record = autoscale.calibrate(model.parse(data, "as.yaml"), str(tmp_path / "out"), run)
    cut = str(tmp_path / "out" / "calibration" / "traces" / "j0.json")
    assert all(e.jobs[0].workload == {"trace": cut} for e, _ in run.ran)
    assert final.jobs[0].workload == {"trace": str(tmp_path / "t.json")}
    assert record["iterations"] == {"j0": {"probe": 3, "run": 8}}
    from traffic.trace import load
    assert len(load(cut).ops[0]) == 3


def test_config_yaml_records_the_calibration_and_still_parses(tmp_path):
    final, record = autoscale.calibrate(_exp(), str(tmp_path), FakeRun(max_ok_link=5e-5))
    path = tmp_path / "config.yaml"
    model.write_resolved(final, str(path), notes=autoscale.config_notes(record))
    text = path.read_text()
    assert "# scale chosen by --auto-scale from link=2.5e-05, bytes=0.001" in text
    assert "#   probe link=5e-05, bytes=0.002: throughput 0.980, faithful  <- chosen" in text
    assert "#   probe link=0.0001, bytes=0.004: throughput 0.800, NOT faithful (cpu)" in text
    assert model.to_dict(model.parse(yaml.safe_load(text), str(path))) == model.to_dict(final)


def test_the_summary_table_shows_the_probes(tmp_path):
    _, record = autoscale.calibrate(_exp(), str(tmp_path), FakeRun(max_ok_link=5e-5, fail_above=5e-5))
    out = io.StringIO()
    print_calibration(record, out)
    text = out.getvalue()
    assert "calibration (--auto-scale): 3 probes" in text and "j0: 3 of 10" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("  ") and "Mb/s" in ln]
    assert [r.split()[0] for r in rows] == ["2.5e-05", "5e-05", "0.0001"]
    assert rows[1].endswith("<- chosen") and "NOT ok" not in rows[1]
    assert "failed: agents stalled" in rows[2]
    assert "chosen: scale.link=5e-05 scale.bytes=0.002: the largest faithful probe" in text


def test_auto_scale_refuses_a_sweep_with_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, "sweep": {"grid": {"controller.routing": ["ecmp", "shortest"]}}}))
    assert cli.main(["run", str(path), "--auto-scale", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--auto-scale: expected an experiment without a sweep" in err
    assert not (tmp_path / "o").exists()
