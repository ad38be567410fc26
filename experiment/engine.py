"""What every engine owes the experiment layer.

An engine runs one Experiment into a run folder: ``run(exp, out_dir, log=print) -> summary``
(the summary.json it wrote). It raises RunFailure when the run started but could not
finish, and lets Interrupted (SIGINT/SIGTERM) through after keeping what it wrote. The
sweep loop, auto-scale and the CLI handle only these two, whatever the engine.
"""


class RunFailure(RuntimeError):
    """The run started but could not finish (exit status 1)."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM: unwind everything, keep what was written."""
