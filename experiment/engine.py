"""What every engine owes the experiment layer.

An engine runs one Experiment into a run folder: ``run(exp, out_dir, log=print) -> summary``
(the summary.json it wrote, docs/outputs.md). It raises RunFailure when the run started but
could not finish, and lets Interrupted (SIGINT/SIGTERM) through after keeping what it wrote.
The sweep loop, auto-scale and the CLI handle only these two, whatever the engine.

An experiment names its engine (``engine: emulator``, the default). ENGINES are the names a
file may give; dtnet.engines maps each to its run callable. A new engine adds its name here
and registers its callable there.
"""

ENGINES = ("emulator",)
DEFAULT_ENGINE = "emulator"


class RunFailure(RuntimeError):
    """The run started but could not finish (exit status 1)."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM: unwind everything, keep what was written."""


class FolderBusy(RuntimeError):
    """Another live run writes the run folder: refused at once, before anything is written
    (the CLI exits 2: pick another --out)."""
