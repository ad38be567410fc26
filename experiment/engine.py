"""What every engine owes the experiment layer, and which engine runs an experiment.

An engine runs one Experiment into a run folder: ``run(exp, out_dir, log=print) -> summary``
(the summary.json it wrote, docs/outputs.md). It raises RunFailure when the run started but
could not finish, and lets Interrupted (SIGINT/SIGTERM) through after keeping what it wrote.
The sweep loop, auto-scale and the CLI handle only these two, whatever the engine.

An engine may also refuse, before anything runs, what it cannot model:
``check(exp) -> str`` raises InputError naming the key (exit 2) and returns one line that
says what it will run. Engines are named in the experiment file (``engine:``, default
``emulate``); ENGINES maps each name to its code, imported only when used (the emulator's
needs Mininet). A new engine adds one line there.
"""
from __future__ import annotations

import importlib

ENGINES = {
    "emulate": ("emulator.run.runner:run_experiment", None),
    "flow": ("flowsim.runner:run_experiment", "flowsim.runner:check"),
    "packet": ("packetsim.runner:run_experiment", "packetsim.runner:check"),
}

DEFAULT_ENGINE = "emulate"


class RunFailure(RuntimeError):
    """The run started but could not finish (exit status 1)."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM: unwind everything, keep what was written."""


def _load(ref: str):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def runner(name: str):
    """The run(exp, out_dir, ...) function of engine `name`."""
    return _load(ENGINES[name][0])


def check(exp) -> str | None:
    """The engine's own refusals (InputError) and its one-line verdict, or None when it has none."""
    ref = ENGINES[exp.engine][1]
    return _load(ref)(exp) if ref else None


def refuse_non_replay(exp, engine: str, capture_hint: str) -> None:
    """The refusals of every engine without real hosts: packet captures and real programs (InputError)."""
    from badinput import InputError
    from experiment import program
    if exp.capture.links:
        raise InputError("capture.links", f"no packet capture with engine: {engine} ({capture_hint}; capture with "
                         "engine: emulate)", [list(x) for x in exp.capture.links], exp.source)
    for i, job in enumerate(exp.jobs):
        if program.is_program(job.workload):
            raise InputError(f"jobs[{i}].workload.command", f"a workload dtnet replays with engine: {engine} (a "
                             "real program runs only on the emulator's hosts)", " ".join(job.workload["command"])[:60],
                             exp.source)


def run_any(exp, out_dir: str, **kw) -> dict:
    """Run exp on the engine it names (a sweep's points may name different ones)."""
    return runner(exp.engine)(exp, out_dir, **kw)


class FolderBusy(RuntimeError):
    """Another live run writes the run folder: refused at once, before anything is written
    (the CLI exits 2: pick another --out)."""
