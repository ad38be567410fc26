"""Which engine runs an experiment, and what every engine owes the experiment layer.

An engine is a subclass of experiment.pipeline.Engine: it says which plans it runs, how it
executes them, its part of summary.json and its own files; the pipeline owns the run folder
(lock, config.yaml, events.jsonl, failures, summary.json and the outputs). ENGINES maps each
name in the experiment file's ``engine:`` (default ``emulate``) to its class, imported only when
used (the emulator's needs Mininet). A new engine adds one line here.

``experiment.pipeline.runner(name)`` gives ``run(exp, out_dir, log=print, prepare=None,
force=False) -> summary``:
RunFailure when the run started but could not finish, Interrupted (SIGINT/SIGTERM) after
keeping what it wrote, FolderBusy when another live run holds the folder, InputError when the
folder holds a finished run (without force) or the engine refuses the experiment. The sweep
loop, auto-scale and the CLI handle only these, whatever the engine.
"""
from __future__ import annotations

import importlib

# name -> (its Engine class, a light function for `dtnet check` or None): `check` must not
# import the engine itself (the emulator's imports Mininet, which needs no root to check).
ENGINES = {
    "emulate": ("emulator.run.runner:EmulatorEngine", "emulator.check:check"),
    "flow": ("flowsim.runner:FlowEngine", "flowsim.runner:check"),
    "packet": ("packetsim.runner:PacketEngine", "packetsim.runner:check"),
}

DEFAULT_ENGINE = "emulate"


class RunFailure(RuntimeError):
    """The run started but could not finish (exit status 1)."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM: unwind everything, keep what was written."""


class FolderBusy(RuntimeError):
    """Another live run writes the run folder: refused at once, before anything is written
    (the CLI exits 2: pick another --out)."""


def load(ref: str):
    """The object a "module:name" reference names, imported now."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def check(exp) -> str | None:
    """The engine's own refusals (InputError) and its one-line verdict, or None when it has none."""
    ref = ENGINES[exp.engine][1]
    return load(ref)(exp) if ref else None


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
