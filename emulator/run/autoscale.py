"""`dtnet run --auto-scale`: the largest link scale this machine emulates faithfully, found by
short real runs ("probes") of the same experiment, before the run itself.

A probe is the experiment as given (topology, jobs, placement, routing, faults, capture) with
each job cut to its first whole iterations: enough for about PROBE_REPLAY_S of replay and at
least MIN_ITERATIONS, so it replays the run's own traffic pattern, iteration boundary included.
Being shorter, a probe must pass with some headroom (short_of_margin). Every probe keeps the
time dilation (scale.bytes moves with scale.link): it emulates the same real-cluster traffic in
the same wall time, with more or fewer packets a second.

The ladder starts at the configured scale and doubles while probes are faithful, or halves
until one is (doubles, when the first fails for a reason other than CPU), at most MAX_PROBES
probes; it halves no lower than the link rate at which the fidelity checks can still judge a
frame (fidelity.min_judged_mbps). The run takes the largest faithful probe's scale; when no
probe was faithful, the lowest scale that ran, and says so. It assumes that CPU-bound fidelity
falls as the link scale rises, which is what the CPU cost per packet makes it do.

Fidelity is a property of the machine as it is now: load from other processes fails a probe's
cpu check as it would fail the run's.
"""
from __future__ import annotations

import copy
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field

from badinput import InputError
from badinput.paths import inside, open_out
from emulator.run import fidelity
from emulator.testbed.datapath import AFXDP_MTU, MTU
from experiment import model
from experiment.engine import RunFailure
from experiment.model import Experiment
from experiment.outputs.write import write_json
from experiment.plan import build_plans
from traffic.analysis import critical_path
from traffic.trace import dump, first_iterations

MAX_PROBES = 4
FACTOR = 2            # scale.link (and scale.bytes) from one rung of the ladder to the next
PROBE_REPLAY_S = 3.0  # wall seconds of replay a probe aims at: a few of the cpu check's one-second samples
MIN_ITERATIONS = 2    # the first iteration and the boundary into the next
PROBE_TIMEOUT_MIN_S = 60.0
PROBE_TIMEOUT_FACTOR = 10  # a probe this many times slower than its estimate is not faithful anyway
# A probe is shorter than the run: it sees fewer seconds and ops, so its extremes (the least idle
# second, the p99 lateness, which over a few ops is their maximum) come out lower than the run's.
# It must pass those two checks with headroom. Measured on ring-rail-16.yaml (then demo.yaml):
# a 20 Mb/s probe at 15.2 ms lateness, its run at 22.0 (bound 20); bench_fidelity_scale: results
# within 1% at >= 32% idle.
PROBE_CPU_IDLE_MIN_PCT = fidelity.CPU_IDLE_MIN_PCT + 5.0
PROBE_LATENESS_MAX_S = fidelity.LATENESS_P99_MAX_S * 0.75
DIR = "calibration"
RECORD = "calibration.json"
LOG = "run.log"
PROBE_PREFIX = "link="  # a probe's folder: link=<scale.link>

# Checks that a lack of CPU fails: the hosts' idle time, and switches that cannot keep links busy.
CPU_CHECKS = ("cpu", "link_saturation")

# Why the search stopped.
STOP_UNFAITHFUL = "the next scale up was not faithful"
STOP_FAITHFUL = "found a faithful scale going down"
STOP_LIMIT = "probe limit reached"
STOP_RANGE = "the next scale is outside what the emulator runs or its fidelity checks can judge"


@dataclass
class Probe:
    """One probe. ok: it ran to completion and passed every fidelity check, with a probe's margin."""
    rung: int                  # scale = configured scale x FACTOR ** rung
    link: float
    bytes: float
    host_link_mbps: float
    dir: str                   # its run folder, relative to the run's
    status: str = "pending"    # complete | incomplete | failed (could not run) | interrupted
    fidelity_ok: bool | None = None   # the probe's own verdict, as any run's
    margin_ok: bool | None = None     # and with a probe's headroom (short_of_margin)
    normalized_throughput: float | None = None
    failed_checks: list = field(default_factory=list)  # [{name, detail}], and margin: true when only short of it
    error: str | None = None
    wall_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "complete" and bool(self.fidelity_ok) and bool(self.margin_ok)

    @property
    def cpu_bound(self) -> bool:
        """It failed, or fell short, where a faster link only needs more CPU: a slower one may pass."""
        return self.status != "complete" or any(c["name"] in CPU_CHECKS for c in self.failed_checks)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok, "cpu_bound": self.cpu_bound}


def search(probe, valid, max_probes: int = MAX_PROBES) -> tuple[list, str]:
    """Probe rung 0, then go up (rung 1, 2, ...) while probes are faithful, or down (-1, -2, ...)
    until one is; stop at a rung that is not valid or after max_probes. A rung 0 that fails for
    a reason other than CPU (say lateness with the CPU half idle) sends the search up, not down: a
    slower link would not cure it, a faster one may; going up then stops at the first failure
    once a probe was faithful, or at one for lack of CPU. probe(rung) -> an object with .ok and
    .cpu_bound; valid(rung) -> bool. Returns (the probes in order, why it stopped)."""
    done = [probe(0)]
    step = -1 if not done[0].ok and done[0].cpu_bound else 1
    rung = 0
    while True:
        if len(done) >= max_probes:
            return done, STOP_LIMIT
        rung += step
        if not valid(rung):
            return done, STOP_RANGE
        p = probe(rung)
        done.append(p)
        if step == 1 and not p.ok and (p.cpu_bound or any(q.ok for q in done)):
            return done, STOP_UNFAITHFUL
        if step == -1 and p.ok:
            return done, STOP_FAITHFUL


def choose(probes: list) -> tuple[object | None, bool]:
    """(probe to run at, faithful): the faithful probe with the largest link scale; else the
    complete probe with the smallest (the most headroom), unfaithful; (None, False) if none ran."""
    faithful = [p for p in probes if p.ok]
    if faithful:
        return max(faithful, key=lambda p: p.link), True
    ran = [p for p in probes if p.status == "complete"]
    return (min(ran, key=lambda p: p.link), False) if ran else (None, False)


def iterations_for(n: int, iteration_s: float) -> int:
    """How many of a job's n iterations a probe replays, an iteration taking iteration_s of wall time."""
    if n <= MIN_ITERATIONS or iteration_s <= 0:
        return n
    return min(n, max(MIN_ITERATIONS, math.ceil(PROBE_REPLAY_S / iteration_s)))


@dataclass
class ProbePlan:
    data: dict                 # the experiment (as loaded, --set applied) with each job cut short
    iterations: dict           # job -> {"probe": kept, "run": all}
    replay_s: float            # estimated wall seconds of a probe's replay (alpha-beta, no contention)


def plan_probes(exp: Experiment, cal_dir: str) -> ProbePlan:
    """Cut each job to iterations_for() of its iterations: by its workload's `iterations` key, or,
    for a trace file, by writing the first iterations into cal_dir/traces/. Iteration times are
    estimated from the trace's critical path at the host link rate, times the dilation."""
    fabric = exp.fabric()
    jobs = build_plans(exp, fabric)
    data = copy.deepcopy(exp.raw)
    dil = exp.scale.dilation
    iterations, replay_s = {}, 0.0
    for ji, (job, jp) in enumerate(zip(exp.jobs, jobs)):
        its = {o.iteration for ops in jp.trace.ops.values() for o in ops}
        n = len(its)
        link_gbps = min(fabric.host_link_gbps(h) for h in jp.hosts)
        iteration_s = critical_path(jp.trace, link_gbps=link_gbps).total_s / max(n, 1) * dil
        k = n if None in its else iterations_for(n, iteration_s)
        workload = data["jobs"][ji]["workload"]
        if k < n and "trace" in workload:
            cut = first_iterations(jp.trace, k)
            if cut is None:
                k = n
            else:
                path = inside(os.path.abspath(cal_dir), "traces", f"{job.name}.json")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                dump(cut, path)
                data["jobs"][ji]["workload"] = {"trace": path}
        elif k < n:
            data["jobs"][ji]["workload"] = {**workload, "iterations": k}  # a new mapping: YAML aliases may share it
        iterations[job.name] = {"probe": k, "run": n}
        replay_s = max(replay_s, job.start_ms / 1000.0 * dil + k * iteration_s)
    timeout_s = min(exp.testbed.timeout_s, max(PROBE_TIMEOUT_MIN_S, PROBE_TIMEOUT_FACTOR * replay_s))
    data["testbed"] = {**(data.get("testbed") or {}), "timeout_s": timeout_s}
    return ProbePlan(data, iterations, replay_s)


def at_rung(data: dict, exp: Experiment, rung: int) -> Experiment:
    """data at scale = exp's scale x FACTOR ** rung (the dilation unchanged); InputError when out of range."""
    d = copy.deepcopy(data)
    d["scale"] = {"link": exp.scale.link * FACTOR ** rung, "bytes": exp.scale.bytes * FACTOR ** rung}
    return model.parse(d, exp.source)


def clear_previous(cal_dir: str) -> None:
    """Remove what an earlier calibration made here (its record and probe folders, by their own
    names) and nothing else: a user's files in the folder stay. A link among them is refused."""
    os.makedirs(cal_dir, exist_ok=True)
    for name in os.listdir(cal_dir):
        path = inside(cal_dir, name)  # a link out of the folder is refused there, one inside just below
        if os.path.islink(path):
            raise InputError("--out", "a run folder whose files are not symbolic links (a run writes as root)",
                             f"{path} is a symbolic link")
        if name in (RECORD, LOG) and os.path.isfile(path):
            os.remove(path)
        elif name.startswith(PROBE_PREFIX) and os.path.isdir(path):
            shutil.rmtree(path)


def calibrate(exp: Experiment, out_dir: str, run, log=print) -> tuple[Experiment, dict]:
    """Probe, choose, and return (the experiment at the chosen scale, the calibration record).

    run(exp, folder, log) -> summary is runner.run_experiment (a fake in tests). A probe that
    raises RunFailure (TestbedError among them) counts as not faithful; Interrupted ends the calibration.
    The record goes to OUT/calibration/calibration.json after every probe. RunFailure when no
    probe ran to completion: the experiment does not run at any scale tried."""
    cal_dir = inside(out_dir, DIR)
    clear_previous(cal_dir)  # a previous calibration's probes would read as this one's
    plan = plan_probes(exp, cal_dir)
    host_gbps = exp.fabric().link_gbps
    t_all = time.monotonic()
    probes: list[Probe] = []
    record = {"configured": {"link": exp.scale.link, "bytes": exp.scale.bytes}, "dilation": exp.scale.dilation,
              "iterations": plan.iterations, "probe_replay_s_estimated": plan.replay_s,
              "max_probes": MAX_PROBES, "factor": FACTOR, "min_link_mbps": min_link_mbps(exp), "probes": [],
              "chosen": None, "faithful": False, "stopped": None, "reason": None, "wall_s": None}

    def save():
        record["probes"] = [p.to_dict() for p in probes]
        record["wall_s"] = time.monotonic() - t_all
        write_json(inside(cal_dir, RECORD), record)

    cut = ", ".join(f"{j} {v['probe']} of {v['run']} iterations" for j, v in plan.iterations.items())
    log(f"[calibrate] up to {MAX_PROBES} probes of ~{plan.replay_s:.1f} s replay each ({cut}), time dilation "
        f"{exp.scale.dilation:g}x kept -> {cal_dir}/")

    def probe(rung: int) -> Probe:
        pexp = at_rung(plan.data, exp, rung)
        p = Probe(rung, pexp.scale.link, pexp.scale.bytes, pexp.emulated_mbps(host_gbps),
                  os.path.join(DIR, f"{PROBE_PREFIX}{pexp.scale.link:g}"))
        probes.append(p)
        folder = inside(out_dir, p.dir)
        os.makedirs(folder, exist_ok=True)
        log(f"[calibrate] probe {len(probes)}: scale.link={p.link:g} ({p.host_link_mbps:g} Mb/s host links), "
            f"scale.bytes={p.bytes:g}: running")
        t = time.monotonic()
        try:
            with open_out(folder, LOG) as f:
                summary = run(pexp, folder, log=_file_log(f))
        except RunFailure as e:
            p.status, p.error = "failed", str(e)
        else:
            fid = summary["fidelity"]
            p.status, p.error = summary["status"], summary.get("error")
            p.fidelity_ok = fid["ok"]
            p.normalized_throughput = summary["traffic"]["normalized_throughput"]
            p.failed_checks = [{"name": c["name"], "detail": c["detail"]} for c in fid["checks"] if not c["ok"]]
            short = short_of_margin(fid)
            p.margin_ok = not short
            p.failed_checks += short
        finally:
            p.wall_s = time.monotonic() - t
            if p.status == "pending":
                p.status = "interrupted"
            save()
        log(f"[calibrate] probe {len(probes)}: scale.link={p.link:g}: {describe(p.to_dict())} in {p.wall_s:.1f} s")
        return p

    def valid(rung: int) -> bool:
        try:
            pexp = at_rung(plan.data, exp, rung)
        except model.InputError:
            return False
        return rung > 0 or slowest_link_mbps(pexp) >= record["min_link_mbps"]

    _, stopped = search(probe, valid)
    chosen, faithful = choose(probes)
    record["stopped"] = stopped
    if chosen is None:
        record["reason"] = "no probe ran to completion"
        save()
        raise RunFailure(f"--auto-scale: no probe ran to completion (last: {probes[-1].error}); "
                         f"see {cal_dir}/")
    record["chosen"] = {"link": chosen.link, "bytes": chosen.bytes, "host_link_mbps": chosen.host_link_mbps,
                        "dir": chosen.dir}
    record["faithful"] = faithful
    record["reason"] = (f"the largest faithful probe ({stopped})" if faithful else
                        f"no probe was faithful ({stopped}): the run goes ahead at the lowest scale that ran, "
                        "and is likely NOT FAITHFUL too (is the machine loaded? see the failed checks)")
    save()
    final = copy.deepcopy(exp.raw)
    final["scale"] = {"link": chosen.link, "bytes": chosen.bytes}
    return model.parse(final, exp.source), record


def short_of_margin(fid: dict) -> list[dict]:
    """The checks a probe passed, but without a probe's headroom: [{name, detail, margin: true}]."""
    out = []
    for c in fid["checks"]:
        if not c["ok"]:
            continue
        if c["name"] == "cpu" and c.get("idle_min_pct") is not None and c["idle_min_pct"] < PROBE_CPU_IDLE_MIN_PCT:
            out.append({"name": "cpu", "margin": True,
                        "detail": f"min {c['idle_min_pct']:.0f}% idle: a probe needs {PROBE_CPU_IDLE_MIN_PCT:.0f}% "
                                  f"(a run {fidelity.CPU_IDLE_MIN_PCT:.0f}%)"})
        if c["name"] == "lateness" and c.get("p99_s", 0.0) > PROBE_LATENESS_MAX_S:
            out.append({"name": "lateness", "margin": True,
                        "detail": f"p99 {c['p99_s'] * 1e3:.1f} ms: a probe needs <= {PROBE_LATENESS_MAX_S * 1e3:.0f}"
                                  f" ms (a run {fidelity.LATENESS_P99_MAX_S * 1e3:.0f})"})
    return out


def min_link_mbps(exp: Experiment) -> float:
    """The ladder goes no lower than the rate at which the fidelity checks still judge one frame
    (the configured scale is probed even when below it: the user chose it)."""
    return fidelity.min_judged_mbps(AFXDP_MTU if exp.testbed.datapath == "afxdp" else MTU)


def slowest_link_mbps(exp: Experiment) -> float:
    return min(exp.emulated_mbps(d["link_gbps"]) for _, _, d in exp.fabric().links())


def describe(p: dict) -> str:
    """A probe record in a few words: throughput and verdict, or why it has none."""
    if p["status"] in ("failed", "interrupted"):
        return p["status"] + (f": {p['error']}" if p["error"] else "")
    checks = ", ".join(c["name"] for c in p["failed_checks"] if not c.get("margin"))
    margin = ", ".join(c["name"] for c in p["failed_checks"] if c.get("margin"))
    verdict = ("faithful" if not margin else f"faithful, but short of a probe's margin ({margin})") \
        if p["fidelity_ok"] else f"NOT faithful ({checks})"
    head = "" if p["status"] == "complete" else f"{p['status']} ({p['error']}), "
    return f"{head}throughput {p['normalized_throughput']:.3f}, {verdict}"


def config_notes(record: dict) -> list[str]:
    """config.yaml's comment lines about the calibration (the file itself stays a plain experiment)."""
    c = record["configured"]
    lines = [f"scale chosen by --auto-scale from link={c['link']:g}, bytes={c['bytes']:g} "
             f"(time dilation {record['dilation']:g}x; {DIR}/{RECORD} has the details):"]
    for p in record["probes"]:
        mark = "  <- chosen" if record["chosen"] and p["dir"] == record["chosen"]["dir"] else ""
        lines.append(f"  probe link={p['link']:g}, bytes={p['bytes']:g}: {describe(p)}{mark}")
    lines.append(f"  {record['reason']}")
    return lines


def _file_log(f):
    def log(msg):
        f.write(f"{msg}\n")
        f.flush()
    return log


