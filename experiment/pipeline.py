"""One run of one experiment, whatever the engine: the run folder and all in it that is not the engine's.

The pipeline owns the folder: its lock (one live run per folder: FolderBusy), the refusal to
overwrite a finished run, config.yaml, events.jsonl (appended as the run goes, so a run that dies
keeps what it did), RunFailure and Interrupted, and summary.json with the outputs made from the
events (trace.json, plots/), written in `finally` whatever happened (the plots by a forked child
while the parent writes the rest, where the engine allows it and two CPUs are there:
outputs.parallel). Every file goes through badinput.paths (inside the folder, never through a link).

An engine is a subclass of Engine that says only what differs: which plans it runs
(``plan``), how it executes them (``execute``, writing events through ``run.events``), its part
of summary.json (``summary``) and its own files (``write_files``). Adding an engine is one
class and one line in experiment.engine.ENGINES.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import shutil
import time
from dataclasses import dataclass, field

import yaml

from badinput import InputError
from badinput.paths import inside, links_in, open_out
from experiment.engine import ENGINES, FolderBusy, Interrupted, RunFailure, load
from experiment.model import Experiment, to_dict, write_resolved
from experiment.outputs.parallel import WriterFailed, beside, take_warm
from experiment.outputs.write import plots_of, run_events, write_json, write_trace

CONFIG, EVENTS, SUMMARY = "config.yaml", "events.jsonl", "summary.json"
# What a run writes at the top of its folder: refused when planted as links, removed (when left
# by an earlier, unfinished run of the same experiment) before this run writes its own.
RUN_FILES = (CONFIG, EVENTS, SUMMARY, "links.csv", "trace.json", "controller-state.json", "state.json",
             "controller.log", "controller.json", "fabric.json")
RUN_DIRS = ("plots", "plans", "programs", "pcap", "calibration")
# A run with fewer events draws its plots itself: its trace.json and links.csv take less than the
# forked child's own import of matplotlib (about 0.4 CPU s, paid again by each run of a process
# that runs many, where the parent never imports it), so the fork would gain nothing.
FORK_MIN_EVENTS = 20_000


# One encoder for every line (json.dumps with separators builds a new one per call).
_encode = json.JSONEncoder(separators=(",", ":")).encode


class EventLog:
    """events.jsonl, one JSON object a line, flushed as it goes. add() keeps a copy in memory
    for engines that summarize from it (keep=True); lines() passes agents' lines straight on."""

    def __init__(self, out_dir: str, keep: bool):
        self.path = inside(out_dir, EVENTS)
        open_out(out_dir, EVENTS).close()  # empty; then appended, so other writers' lines (O_APPEND) stay
        self.f = open_out(out_dir, EVENTS, append=True)
        self.events: list[dict] | None = [] if keep else None
        self.raw = False  # line() wrote text the kept events do not hold

    def add(self, ev: dict) -> None:
        if self.events is not None:
            self.events.append(ev)
        self.f.write(_encode(ev) + "\n")

    def extend(self, evs: list[dict]) -> None:
        """Many events at once: the lines add() would write, joined in one write."""
        if self.events is not None:
            self.events.extend(evs)
        if evs:
            self.f.write("\n".join(map(_encode, evs)) + "\n")

    def line(self, text: str) -> None:
        """One event line as an agent wrote it (newline included)."""
        self.raw = True
        self.f.write(text)

    def flush(self) -> None:
        self.f.flush()

    def kept(self) -> list[dict] | None:
        """Every event of the file, from memory (None when not kept, or when it holds other lines)."""
        return None if self.raw else self.events

    def close(self) -> None:
        if not self.f.closed:
            self.f.close()


@dataclass
class Run:
    """What an engine is handed: the experiment, its folder, fabric and plans, the events log, and
    the outcome it may set (status and error are the pipeline's unless the engine knows better)."""
    exp: Experiment
    out_dir: str
    fabric: object
    jobs: list
    events: EventLog
    log: object = print
    calibration: dict | None = None
    status: str = "incomplete"
    error: str | None = None
    t_start: float | None = None  # the replay's start on the events' clock (trace.json's zero)
    links: object = None  # links.csv as outputs.links.LinkGrid, when the engine holds it (Engine.link_grid)
    warm: object = None  # a child importing matplotlib since the command started (outputs.parallel.Warm)
    wall_t0: float = field(default_factory=time.monotonic)

    def path(self, *parts: str) -> str:
        return inside(self.out_dir, *parts)


class Engine:
    """What an engine supplies. Subclasses override what they need; the defaults do nothing."""
    name = ""
    label = ""  # in the plots' titles
    keep_events = False  # the engine's summary reads run.events.events, not the file
    calibrates = False  # accepts --auto-scale's prepare step
    force = False  # --force: the user asked to go on (a finished run overwritten, a long run started)
    fork_outputs = False  # the plots may be drawn by a forked child (outputs.parallel) after the run

    def check(self, exp: Experiment) -> str | None:
        """Refuse what the engine cannot model (InputError); one line on what it will run."""
        return None

    def plan(self, exp: Experiment, fabric) -> list:
        """The job plans it runs (bad workloads fail here, before anything is written)."""
        raise NotImplementedError

    def notes(self, exp: Experiment, run: Run) -> list[str]:
        """Comment lines for config.yaml."""
        return []

    def execute(self, run: Run) -> None:
        """Run the plans; raise RunFailure when the run cannot finish. Interrupted passes."""
        raise NotImplementedError

    def summary(self, run: Run) -> dict | None:
        """summary.json, built with experiment.outputs.summary.build; called whatever happened
        (None only when the run never began: then no summary and no outputs are written)."""
        raise NotImplementedError

    def write_files(self, run: Run) -> None:
        """The engine's own files at the end (links.csv, controller-state.json...), whatever happened."""

    def link_grid(self, run: Run):
        """links.csv's utilization as outputs.links.LinkGrid when the engine holds it in memory (the
        heatmap then draws it while write_files writes the file), else None (the heatmap reads the file)."""
        return None

    def outputs_exp(self, exp: Experiment) -> Experiment:
        """The experiment as trace.json and plots should read it (a model in real units drops scale)."""
        return exp


def lock_folder(out_dir: str) -> int:
    """Hold the run folder for this process (an flock, gone with the process): two live runs
    never write one folder. FolderBusy, the same on every engine, when another holds it."""
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderBusy(f"{out_dir} is the folder of a dtnet run that is still going; "
                         "give this run another --out") from None
    return fd


def previous_run(out_dir: str) -> tuple[str | None, dict | None]:
    """(status of the run the folder holds, its experiment as config.yaml wrote it), or Nones."""
    try:
        with open(inside(out_dir, SUMMARY)) as f:
            status = json.load(f).get("status", "incomplete")
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError):
        status = "unreadable"
    try:
        with open(inside(out_dir, CONFIG)) as f:
            config = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        config = None
    return status, config if isinstance(config, dict) else None


def same_experiment(exp: Experiment, config: dict | None) -> bool:
    """config.yaml of an earlier run describes this very experiment (every default resolved)."""
    return config is not None and config == yaml.safe_load(yaml.safe_dump(to_dict(exp), sort_keys=False))


def refuse_overwrite(out_dir: str, exp: Experiment, force: bool) -> None:
    """A finished run is not overwritten without --force: InputError before anything is written.
    An unfinished run of the same experiment is a resume: it runs again in place."""
    links = links_in(out_dir, RUN_FILES + RUN_DIRS)
    if links:
        raise InputError("--out", "a run folder whose files are not symbolic links (a run writes as root)",
                         f"{links[0]} is a symbolic link")
    if force:
        return
    status, config = previous_run(out_dir)
    if status is None or (status != "complete" and same_experiment(exp, config)):
        return
    what = "a finished run" if status == "complete" else f"an {status} run of another experiment"
    raise InputError("--out", "a folder without a finished run (give another --out, or --force to overwrite it)",
                     f"{out_dir} holds {what} ({SUMMARY})")


def clear_previous(out_dir: str) -> None:
    """What an earlier run of this folder wrote, so none of it reads as this run's (links refused
    already). Only the pipeline's and engines' own names: a user's other files stay."""
    for name in RUN_FILES:
        path = inside(out_dir, name)
        if os.path.isfile(path):
            os.remove(path)
    for name in RUN_DIRS:
        if name == "calibration":
            continue  # --auto-scale's own: it clears what it made
        path = inside(out_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)


def run(engine: Engine, exp: Experiment, out_dir: str, log=print, prepare=None, force: bool = False) -> dict:
    """Run exp on engine into out_dir; the summary it wrote. InputError (nothing written),
    FolderBusy, RunFailure; Interrupted passes after what was written is kept."""
    if prepare is not None and not engine.calibrates:
        raise InputError("--auto-scale", "engine: emulate (only the emulator has a scale to calibrate)",
                         f"engine: {engine.name}", exp.source)
    engine.force = force
    # A warm child for the plots: this run's when it draws them at its end, else ended now.
    warm = take_warm()
    if warm is not None and not (engine.fork_outputs and exp.outputs.plots and prepare is None):
        warm.close()
        warm = None
    try:
        return _held(engine, exp, out_dir, log, prepare, force, warm)
    finally:
        if warm is not None:
            warm.close()  # no-op once the run sent it its plots and waited


def _held(engine: Engine, exp: Experiment, out_dir: str, log, prepare, force: bool, warm) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    lock = lock_folder(out_dir)
    try:
        with settled() as settle:  # what is alive now (the modules) is left out of the collector's passes
            # Bad input first (it names the file and key), then the folder, then calibration.
            verdict = engine.check(exp)
            fabric = exp.fabric()
            jobs = engine.plan(exp, fabric)  # bad workloads fail here, before anything is written
            refuse_overwrite(out_dir, exp, force)
            calibration = None
            if prepare is not None:
                exp, calibration = prepare(exp)
                verdict, fabric = engine.check(exp), exp.fabric()
                jobs = engine.plan(exp, fabric)
            return _run(engine, exp, out_dir, log, fabric, jobs, verdict, calibration, settle, warm)
    finally:
        os.close(lock)


def _run(engine: Engine, exp: Experiment, out_dir: str, log, fabric, jobs, verdict, calibration, settle,
         warm=None) -> dict:
    clear_previous(out_dir)
    events = EventLog(out_dir, keep=engine.keep_events)
    r = Run(exp, out_dir, fabric, jobs, events, log, calibration, warm=warm)
    notes = ([f"run by the {engine.label}: {verdict}"] if verdict else []) + engine.notes(exp, r)
    with open_out(out_dir, CONFIG) as f:
        write_resolved(exp, f, notes=notes)
    ran = False
    settle()  # the plans and the fabric, left out of the collector's passes from now on
    try:
        engine.execute(r)  # it sets r.status = "complete" when every op finished
        ran = True
    except (RunFailure, Interrupted) as e:
        r.error = r.error or (str(e) if isinstance(e, RunFailure) else f"interrupted by {e}")
        raise
    finally:
        events.close()
        settle()  # and the run's events and state
        summary = engine.summary(r)
        if summary is not None:  # None: the engine refused the run before it began
            write_json(inside(out_dir, SUMMARY), summary)
            try:
                write_outputs(engine, r, summary)
            except WriterFailed as e:  # the run failed; summary.json says so, and a rerun resumes it
                summary.update(status="incomplete", error=str(e))
                write_json(inside(out_dir, SUMMARY), summary)
                if ran:
                    raise
                log(f"[run] warning: {e}")  # the run's own failure passes on
    return summary


def write_outputs(engine: Engine, r: Run, summary: dict) -> None:
    """The engine's files, trace.json and plots/, the plots drawn by a forked child meanwhile where
    two CPUs are there and the run has FORK_MIN_EVENTS events or more, or by the warm child
    `dtnet run` started, sent them, for a smaller one (outputs.parallel; WriterFailed when it fails). The plots need links.csv's
    numbers: from memory (engine.link_grid), else from the file, written before the child starts."""
    exp, out_dir, log = engine.outputs_exp(r.exp), r.out_dir, r.log
    r.links = engine.link_grid(r)
    if r.links is None:
        engine.write_files(r)
    events = run_events(out_dir, r.events.kept(), log)
    large = len(events) >= FORK_MIN_EVENTS
    fork = None if engine.fork_outputs and large else False
    draw = plots_of(out_dir, exp, summary, r.t_start, engine.label, r.links, events) if exp.outputs.plots else None
    warm, r.warm = r.warm, None
    if warm is not None and (large or draw is None):  # a large run's data is the forked child's, not a pipe's
        warm.close()
        warm = None
    if warm is not None:
        draw.split = True  # matplotlib imported already: the heatmap forked from the warm child
    with beside(draw, "plots/", log, fork=fork, warm=warm):
        if r.links is not None:
            engine.write_files(r)
        write_trace(out_dir, exp, r.jobs, r.t_start, log, events)


_RUNS_SETTLED = 0  # runs this process has settled: a script or a sweep may run many


@contextlib.contextmanager
def settled():
    """The objects alive now left out of the garbage collector's passes (gc.freeze), which would
    otherwise walk them all again at each full pass while a run allocates an object or more per op
    and per event, and finds few cycles; the function it yields leaves out those made since as
    well (the pipeline calls it after the plans, and after the run, before the outputs). One full
    pass first: a run's own reference cycles are frozen with the rest and stay after it, and a
    script that ran one experiment after another grew by 3.4 MB a run (bench/bench_soak.py)
    until the next run froze them again."""
    if gc.get_freeze_count():  # someone embedding dtnet froze objects: leave theirs frozen, freeze nothing
        yield lambda: None
        return
    global _RUNS_SETTLED
    if _RUNS_SETTLED:  # an earlier run's cycles, before they are frozen with the rest
        gc.collect()  # (a full pass: 0.25 s after the imports, which a lone command need not pay)
    _RUNS_SETTLED += 1
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def engine(name: str) -> Engine:
    """A fresh instance of engine `name`'s class (experiment.engine.ENGINES)."""
    return load(ENGINES[name][0])()


def runner(name: str):
    """run(exp, out_dir, log=print, prepare=None, force=False) -> summary on engine `name`."""
    def run_on(exp, out_dir: str, log=print, prepare=None, force: bool = False) -> dict:
        return run(engine(name), exp, out_dir, log=log, prepare=prepare, force=force)
    return run_on


def run_any(exp, out_dir: str, **kw) -> dict:
    """Run exp on the engine it names (a sweep's points may name different ones)."""
    return runner(exp.engine)(exp, out_dir, **kw)
