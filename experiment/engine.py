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
    "emulate": ("emulator.run.runner:run_experiment", "emulator.testbed.transport:check"),
    "flow": ("flowsim.runner:run_experiment", "flowsim.runner:check"),
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


def run_any(exp, out_dir: str, **kw) -> dict:
    """Run exp on the engine it names (a sweep's points may name different ones)."""
    return runner(exp.engine)(exp, out_dir, **kw)


class FolderBusy(RuntimeError):
    """Another live run writes the run folder: refused at once, before anything is written
    (the CLI exits 2: pick another --out)."""
